// dd_proto.h: the gather wire protocol, shared by the reader (dd_gather_client.c),
// the target (dd_gather_server.c) and the Go side (through cgo). Pure C:
// no libfabric call, so its validator (dd_gcheck.c) is built and tested on
// its own (testdata/ctest, make test-asan).
#ifndef DD_PROTO_H
#define DD_PROTO_H

#include <stdint.h>
#include <stddef.h>
#include <rdma/fi_errno.h>

// ---- gather: batched reads served by the target's CPU ----------------------
//
// On software-RMA providers (tcp, sockets, udp, net) every fi_read is a
// request the target's progress thread answers anyway, so a batch is cheaper
// as one tagged request per peer: the reader sends its endpoint name, a
// request id, the job's gather key and the (key, address, length) list to
// the server endpoint; the server validates every entry against its
// exports, packs the rows into a send buffer and fi_tsend's them back with
// tag DD_GREP_BIT|id. An invalid entry gets an error reply naming it, never
// an out-of-bounds copy.
//
// The gather key (gkey) is a per-job 64-bit value (the engine derives it
// from the job's secret) that every request carries; a server with a
// non-zero key answers only requests that carry it: any other request is
// dropped without a reply and without touching the address vector, and
// counted as a stranger. Key 0 means no check. It travels in the clear (as
// MR keys do): it keeps out other users and jobs, not an on-path sniffer.

#define DD_GREQ_TAG   0x0DD0000000000000ULL // requests (to server endpoints)
#define DD_GREP_BIT   0x4000000000000000ULL // replies: DD_GREP_BIT | request id
#define DD_GMAGIC_REQ 0x51524444u
#define DD_GMAGIC_REP 0x50524444u
#define DD_GMAX_ENT   1024           // entries per request
#define DD_GMAX_NAME  256            // endpoint name bytes
#define DD_GMAX_BYTES (64ULL << 20)  // largest reply a server builds
#define DD_GSRV_RECVS 4              // requests a server keeps receives posted for
#define DD_GSRV_SENDS 4              // replies a server keeps in flight
#define DD_GTEXT      240            // error text in a reply
// rxm's eager limit (FI_OFI_RXM_EAGER_LIMIT) that dd_load sets unless the
// environment has one: above the largest reply, header and text included,
// so no gather reply goes by rendezvous (see dd_lib.c).
#define DD_RXM_EAGER_LIMIT (DD_GMAX_BYTES + 4096)

typedef struct dd_greq_hdr { uint32_t magic, nent; uint64_t id; uint32_t namelen, pad; uint64_t total, gkey; } dd_greq_hdr;
typedef struct dd_gent { uint64_t key, addr, len; } dd_gent;
typedef struct dd_grep_hdr { uint32_t magic; int32_t status; uint64_t id; uint64_t bytes; uint32_t textlen, entry; } dd_grep_hdr;

#define DD_ALIGN8(x) (((x) + 7) & ~(size_t)7)
#define DD_GREQ_MAX (sizeof(dd_greq_hdr) + DD_GMAX_NAME + DD_GMAX_ENT * sizeof(dd_gent))

typedef struct dd_gexport { uint64_t key, base, size; char *ptr; } dd_gexport;
// dd_greq_view is a request that dd_greq_parse accepted: every pointer
// lies inside the received bytes.
typedef struct dd_greq_view {
	const dd_greq_hdr *h;
	const char *name;
	uint32_t namelen;
	const dd_gent *ent;
	uint32_t nent;
} dd_greq_view;

// dd_greq_parse checks a request of len bytes at buf: its magic, then its
// gather key against gkey (unless gkey is 0; compared in constant time),
// then its framing (name length, entry count, and that header, name and
// entries lie within len, exactly). want_namelen, when not 0, is the only
// name length accepted (every endpoint of a provider has the same address
// length). Returns 0 and fills *v; DD_GREQ_STRANGER: a request of another
// key (not the job's: drop it, count it); -1: a garbled request nobody can
// be answered for.
#define DD_GREQ_STRANGER (-2)
int dd_greq_parse(const char *buf, size_t len, uint32_t want_namelen, uint64_t gkey, dd_greq_view *v);

// dd_greq_check validates every entry of a parsed request against the
// exports ex[0..nex): a known key, a non-empty range inside the region, and
// a reply of at most max_bytes in total. Returns 0 with *total set, or
// FI_EINVAL / FI_EMSGSIZE with the first bad entry in *bad and a message in
// text (textlen bytes, NUL-terminated).
int dd_greq_check(const dd_greq_view *v, const dd_gexport *ex, int nex, uint64_t max_bytes,
	uint64_t *total, uint32_t *bad, char *text, size_t textlen);

// dd_grep_build writes the reply to a request that dd_greq_check judged
// (status, bad, total, text as it set them) at out, which holds
// dd_grep_size(status, total, text) bytes: the header, then the rows the
// entries name, copied from the exports in entry order (status 0), or the
// error text with its NUL. Returns the bytes written.
size_t dd_grep_size(int status, uint64_t total, const char *text);
size_t dd_grep_build(char *out, const dd_greq_view *v, const dd_gexport *ex, int nex,
	int status, uint32_t bad, uint64_t total, const char *text);

// dd_gexport_find is the export with key, or NULL; *last caches the index of
// the previous hit (consecutive entries usually share a region).
const dd_gexport *dd_gexport_find(const dd_gexport *ex, int nex, uint64_t key, int *last);

#endif
