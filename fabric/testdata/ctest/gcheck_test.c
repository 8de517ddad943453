// C unit tests of the gather request validator (dd_gcheck.c): a malformed or
// hostile request is rejected, and nothing outside the received bytes is
// read. Every request is placed so that it ends at a PROT_NONE guard page
// (and, under make test-asan, AddressSanitizer watches too): a read one byte
// past it crashes the test. Built and run by TestGatherCheckC.
#define _GNU_SOURCE
#include "dd_proto.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int checks, failures;
#define EXPECT(cond, ...) do { checks++; if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

// guarded copies len bytes to the end of a mapping followed by a guard page.
static char *guard_base; static size_t guard_size;
static const char *guarded(const void *src, size_t len) {
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	if (guard_base) munmap(guard_base, guard_size);
	size_t data = (len + pg - 1) / pg * pg;
	if (data == 0) data = pg;
	guard_size = data + pg;
	guard_base = mmap(NULL, guard_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (guard_base == MAP_FAILED) { perror("mmap"); exit(2); }
	mprotect(guard_base + data, pg, PROT_NONE);
	char *p = guard_base + data - len;
	memcpy(p, src, len);
	return p;
}

#define NAMELEN 24
#define KEY 0x9e3779b97f4a7c15ULL // the job's gather key in these requests
typedef struct { char b[DD_GREQ_MAX]; size_t len; } req;

static void build(req *r, uint32_t nent, const dd_gent *ent) {
	dd_greq_hdr h = { DD_GMAGIC_REQ, nent, 42, NAMELEN, 0, 0, KEY };
	memset(r->b, 0, sizeof r->b);
	memcpy(r->b, &h, sizeof h);
	memset(r->b + sizeof h, 'n', NAMELEN);
	memcpy(r->b + sizeof h + DD_ALIGN8(NAMELEN), ent, nent * sizeof *ent);
	r->len = sizeof h + DD_ALIGN8(NAMELEN) + nent * sizeof *ent;
}

static void set_hdr(req *r, size_t off, uint32_t v) { memcpy(r->b + off, &v, sizeof v); }

int main(void) {
	static char region_a[1 << 16], region_b[4096];
	dd_gexport ex[2] = { { 0x10, 0x1000, sizeof region_a, region_a }, { 0x20, 0, sizeof region_b, region_b } };
	dd_greq_view v;
	uint64_t total; uint32_t bad; char text[DD_GTEXT];
	req r;

	// A valid request.
	dd_gent ok[2] = { { 0x10, 0x1000, 100 }, { 0x20, 4000, 96 } };
	build(&r, 2, ok);
	EXPECT(dd_greq_parse(guarded(r.b, r.len), r.len, NAMELEN, 0, &v) == 0, "valid request rejected");
	EXPECT(v.nent == 2 && v.namelen == NAMELEN, "view nent %u namelen %u", v.nent, v.namelen);
	EXPECT(dd_greq_check(&v, ex, 2, DD_GMAX_BYTES, &total, &bad, text, sizeof text) == 0 && total == 196, "valid entries: total %llu: %s", (unsigned long long)total, text);
	EXPECT(dd_greq_parse(guarded(r.b, r.len), r.len, 0, 0, &v) == 0, "any name length accepted with want 0");

	// The gather key: the job's is accepted; any other (one bit off, 0,
	// the complement) is a stranger, before any framing check; a server
	// with key 0 checks nothing.
	EXPECT(dd_greq_parse(guarded(r.b, r.len), r.len, NAMELEN, KEY, &v) == 0, "the job's key refused");
	for (int bit = 0; bit < 64; bit++) {
		EXPECT(dd_greq_parse(guarded(r.b, r.len), r.len, NAMELEN, KEY ^ (1ULL << bit), &v) == DD_GREQ_STRANGER, "key one bit %d off accepted", bit);
	}
	req k = r; uint64_t zero = 0; memcpy(k.b + 32, &zero, 8);
	EXPECT(dd_greq_parse(guarded(k.b, k.len), k.len, NAMELEN, KEY, &v) == DD_GREQ_STRANGER, "key 0 accepted by a keyed server");
	EXPECT(dd_greq_parse(guarded(k.b, k.len), k.len, NAMELEN, 0, &v) == 0, "a server without a key refused a request");
	set_hdr(&k, 4, 3); // a stranger's garbled request is still a stranger
	EXPECT(dd_greq_parse(guarded(k.b, k.len), k.len, NAMELEN, KEY, &v) == DD_GREQ_STRANGER, "stranger's garbled request not a stranger");
	EXPECT(dd_greq_parse(guarded(k.b, k.len), k.len, NAMELEN, 0, &v) == -1, "garbled request accepted without a key");

	// Framing: every short, long or garbled request is rejected.
	for (size_t l = 0; l < r.len; l++)
		EXPECT(dd_greq_parse(guarded(r.b, l), l, NAMELEN, 0, &v) == -1, "truncated to %zu bytes accepted", l);
	EXPECT(dd_greq_parse(guarded(r.b, r.len + 1), r.len + 1, NAMELEN, 0, &v) == -1, "trailing byte accepted");
	EXPECT(dd_greq_parse(NULL, 0, 0, 0, &v) == -1, "NULL accepted");
	req m = r; set_hdr(&m, 0, 0x12345678);
	EXPECT(dd_greq_parse(guarded(m.b, m.len), m.len, 0, 0, &v) == -1, "bad magic accepted");
	m = r; set_hdr(&m, 16, 0);
	EXPECT(dd_greq_parse(guarded(m.b, m.len), m.len, 0, 0, &v) == -1, "namelen 0 accepted");
	m = r; set_hdr(&m, 16, DD_GMAX_NAME + 1);
	EXPECT(dd_greq_parse(guarded(m.b, m.len), m.len, 0, 0, &v) == -1, "namelen > max accepted");
	m = r; set_hdr(&m, 16, 0xffffffffu);
	EXPECT(dd_greq_parse(guarded(m.b, m.len), m.len, 0, 0, &v) == -1, "namelen 2^32-1 accepted");
	m = r; set_hdr(&m, 16, NAMELEN + 8);
	EXPECT(dd_greq_parse(guarded(m.b, m.len), m.len, NAMELEN, 0, &v) == -1, "other name length accepted");
	m = r; set_hdr(&m, 4, DD_GMAX_ENT + 1);
	EXPECT(dd_greq_parse(guarded(m.b, m.len), m.len, 0, 0, &v) == -1, "nent > max accepted");
	m = r; set_hdr(&m, 4, 0xffffffffu);
	EXPECT(dd_greq_parse(guarded(m.b, m.len), m.len, 0, 0, &v) == -1, "nent 2^32-1 accepted");
	m = r; set_hdr(&m, 4, 3); // claims 3 entries, carries 2
	EXPECT(dd_greq_parse(guarded(m.b, m.len), m.len, 0, 0, &v) == -1, "nent beyond the bytes accepted");
	// The largest legal request parses.
	static dd_gent many[DD_GMAX_ENT];
	for (int i = 0; i < DD_GMAX_ENT; i++) many[i] = (dd_gent){ 0x20, (uint64_t)i, 1 };
	build(&r, DD_GMAX_ENT, many);
	EXPECT(dd_greq_parse(guarded(r.b, r.len), r.len, NAMELEN, 0, &v) == 0, "largest request rejected");
	EXPECT(dd_greq_check(&v, ex, 2, DD_GMAX_BYTES, &total, &bad, text, sizeof text) == 0 && total == DD_GMAX_ENT, "largest request entries");

	// Entries: each hostile one is rejected and named.
	struct { dd_gent e; int want; const char *what; } cases[] = {
		{ { 0x99, 0x1000, 8 }, FI_EINVAL, "unknown key" },
		{ { 0x10, 0xfff, 8 }, FI_EINVAL, "address below the region" },
		{ { 0x10, 0x1000, 0 }, FI_EINVAL, "zero length" },
		{ { 0x10, 0x1000 + sizeof region_a, 1 }, FI_EINVAL, "address at the end" },
		{ { 0x10, 0x1000 + sizeof region_a - 4, 5 }, FI_EINVAL, "one byte past the end" },
		{ { 0x10, 0x1000, sizeof region_a + 1 }, FI_EINVAL, "longer than the region" },
		{ { 0x10, 0x1001, UINT64_MAX }, FI_EINVAL, "length that wraps" },
		{ { 0x10, UINT64_MAX, 2 }, FI_EINVAL, "address that wraps" },
		{ { 0x20, UINT64_MAX - 3, 8 }, FI_EINVAL, "address near 2^64" },
		{ { 0x10, 0x1000 + sizeof region_a - 4, 4 }, 0, "last bytes of the region" },
	};
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		dd_gent e3[3] = { ok[0], ok[1], cases[c].e };
		build(&r, 3, e3);
		EXPECT(dd_greq_parse(guarded(r.b, r.len), r.len, NAMELEN, 0, &v) == 0, "%s: framing", cases[c].what);
		int st = dd_greq_check(&v, ex, 2, DD_GMAX_BYTES, &total, &bad, text, sizeof text);
		EXPECT(st == cases[c].want, "%s: status %d, want %d (%s)", cases[c].what, st, cases[c].want, text);
		if (cases[c].want) EXPECT(bad == 2 && strstr(text, "entry 2") != NULL, "%s: bad %u text %s", cases[c].what, bad, text);
	}
	// No exports at all.
	build(&r, 2, ok);
	dd_greq_parse(guarded(r.b, r.len), r.len, NAMELEN, 0, &v);
	EXPECT(dd_greq_check(&v, ex, 0, DD_GMAX_BYTES, &total, &bad, text, sizeof text) == FI_EINVAL && bad == 0, "no exports");
	// The reply limit: exactly the limit passes, one byte more is EMSGSIZE.
	EXPECT(dd_greq_check(&v, ex, 2, 196, &total, &bad, text, sizeof text) == 0, "reply at the limit");
	EXPECT(dd_greq_check(&v, ex, 2, 195, &total, &bad, text, sizeof text) == FI_EMSGSIZE && bad == 1, "reply over the limit: bad %u", bad);
	// A tiny text buffer is never overrun.
	char tiny[4];
	EXPECT(dd_greq_check(&v, ex, 0, DD_GMAX_BYTES, &total, &bad, tiny, sizeof tiny) == FI_EINVAL && strlen(tiny) == 3, "tiny text");

	// Random requests: never crash or read past the bytes; anything accepted
	// is inside the exports.
	srand(12345);
	for (int it = 0; it < 200000; it++) {
		size_t len = (size_t)rand() % 512;
		build(&r, 2, ok);
		if (it % 2) for (size_t i = 0; i < len; i++) r.b[i] = (char)rand();
		else { for (int f = 0; f < 4; f++) r.b[rand() % (r.len + 8)] = (char)rand(); len = r.len + (size_t)(rand() % 3) - 1; }
		if (len > sizeof r.b) len = sizeof r.b;
		if (dd_greq_parse(guarded(r.b, len), len, 0, 0, &v) != 0) continue;
		if (dd_greq_check(&v, ex, 2, DD_GMAX_BYTES, &total, &bad, text, sizeof text) != 0) continue;
		uint64_t sum = 0;
		for (uint32_t e = 0; e < v.nent; e++) {
			dd_gent x; memcpy(&x, &v.ent[e], sizeof x);
			const dd_gexport *g = x.key == 0x10 ? &ex[0] : x.key == 0x20 ? &ex[1] : NULL;
			EXPECT(g && x.len > 0 && x.addr >= g->base && x.addr - g->base <= g->size && x.len <= g->size - (x.addr - g->base),
				"random request %d: accepted entry %u out of bounds", it, e);
			sum += x.len;
		}
		EXPECT(sum == total, "random request %d: total %llu, entries %llu", it, (unsigned long long)total, (unsigned long long)sum);
	}
	if (failures) { fprintf(stderr, "gcheck: %d of %d checks failed\n", failures, checks); return 1; }
	printf("gcheck: %d checks passed\n", checks);
	return 0;
}
