// dd_gcheck.c: the gather request validator. Pure C (no libfabric call):
// the target runs every received request through it before it copies a
// byte, and its bounds checks have C unit tests of their own
// (testdata/ctest/gcheck_test.c, run by TestGatherCheckC and, under
// AddressSanitizer, by make test-asan) and a Go fuzz target.
// Part of package fabric (compiled by cgo); see dd_proto.h.

#include "dd_proto.h"
#include <stdio.h>
#include <string.h>

int dd_greq_parse(const char *buf, size_t len, uint32_t want_namelen, uint64_t gkey, dd_greq_view *v) {
	dd_greq_hdr h;
	if (!buf || len < sizeof h) return -1;
	memcpy(&h, buf, sizeof h); // buf may be unaligned (fuzzing)
	if (h.magic != DD_GMAGIC_REQ) return -1;
	// One compare of the whole word (constant time: no early exit on the
	// first differing byte, as memcmp may take).
	if (gkey != 0 && (h.gkey ^ gkey) != 0) return DD_GREQ_STRANGER;
	if (h.namelen == 0 || h.namelen > DD_GMAX_NAME) return -1;
	if (want_namelen && h.namelen != want_namelen) return -1;
	if (h.nent > DD_GMAX_ENT) return -1;
	// All three terms are bounded (32 + 256 + 1024*24), so no overflow.
	size_t need = sizeof h + DD_ALIGN8((size_t)h.namelen) + (size_t)h.nent * sizeof(dd_gent);
	if (len != need) return -1;
	v->h = (const dd_greq_hdr *)buf;
	v->name = buf + sizeof h;
	v->namelen = h.namelen;
	v->ent = (const dd_gent *)(buf + sizeof h + DD_ALIGN8((size_t)h.namelen));
	v->nent = h.nent;
	return 0;
}

const dd_gexport *dd_gexport_find(const dd_gexport *ex, int nex, uint64_t key, int *last) {
	if (*last >= 0 && *last < nex && ex[*last].key == key) return &ex[*last];
	for (int j = 0; j < nex; j++)
		if (ex[j].key == key) { *last = j; return &ex[j]; }
	return NULL;
}

int dd_greq_check(const dd_greq_view *v, const dd_gexport *ex, int nex, uint64_t max_bytes,
		uint64_t *total, uint32_t *bad, char *text, size_t textlen) {
	uint64_t sum = 0;
	int last = -1;
	*total = 0; *bad = 0;
	if (textlen) text[0] = 0;
	for (uint32_t e = 0; e < v->nent; e++) {
		dd_gent x;
		memcpy(&x, &v->ent[e], sizeof x);
		const dd_gexport *r = dd_gexport_find(ex, nex, x.key, &last);
		if (!r) {
			*bad = e;
			snprintf(text, textlen, "entry %u: no exported region with key %#llx", e, (unsigned long long)x.key);
			return FI_EINVAL;
		}
		// In range without overflow: base <= addr, off <= size, len <= size - off.
		if (x.len == 0 || x.addr < r->base || x.addr - r->base > r->size || x.len > r->size - (x.addr - r->base)) {
			*bad = e;
			snprintf(text, textlen, "entry %u: %llu bytes at address %#llx outside region key %#llx [%#llx, +%llu)", e,
				(unsigned long long)x.len, (unsigned long long)x.addr, (unsigned long long)x.key,
				(unsigned long long)r->base, (unsigned long long)r->size);
			return FI_EINVAL;
		}
		if (x.len > max_bytes - sum) {
			*bad = e;
			snprintf(text, textlen, "entry %u: reply exceeds the target's limit of %llu bytes", e, (unsigned long long)max_bytes);
			return FI_EMSGSIZE;
		}
		sum += x.len;
	}
	*total = sum;
	return 0;
}

size_t dd_grep_size(int status, uint64_t total, const char *text) {
	return sizeof(dd_grep_hdr) + (status ? strlen(text) + 1 : total);
}

size_t dd_grep_build(char *out, const dd_greq_view *v, const dd_gexport *ex, int nex,
		int status, uint32_t bad, uint64_t total, const char *text) {
	dd_grep_hdr rh = { .magic = DD_GMAGIC_REP, .status = status, .entry = bad };
	memcpy(&rh.id, &v->h->id, sizeof rh.id); // the request may be unaligned (fuzzing)
	char *p = out + sizeof rh;
	if (status) {
		rh.textlen = (uint32_t)strlen(text) + 1;
		memcpy(p, text, rh.textlen);
	} else {
		rh.bytes = total;
		int last = -1;
		for (uint32_t e = 0; e < v->nent; e++) {
			dd_gent x;
			memcpy(&x, &v->ent[e], sizeof x);
			const dd_gexport *r = dd_gexport_find(ex, nex, x.key, &last);
			memcpy(p, r->ptr + (x.addr - r->base), x.len);
			p += x.len;
		}
	}
	memcpy(out, &rh, sizeof rh);
	return sizeof rh + (status ? rh.textlen : total);
}
