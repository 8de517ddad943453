// dd_info.c: Provider selection and description, fabric/domain/endpoint
// opening, memory registration.
// Part of package fabric (compiled by cgo); see dd.h.

#include "dd.h"

// dd_getinfo lists every provider/domain that can do one-sided reads on a
// reliable datagram endpoint with the memory-registration modes we handle.
// Data progress is left unspecified on purpose (asking for AUTO drops shm).
// threading is the FI_THREAD_* level asked for.
int dd_getinfo(struct fi_info **out, int threading) {
	struct fi_info *hints = dd_fi.dupinfo(NULL);
	if (!hints) return -FI_ENOMEM;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = DD_CAPS;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = DD_MR_MODES;
	hints->domain_attr->threading = threading;
	int rc = dd_fi.getinfo(FI_VERSION(1, 11), NULL, NULL, 0, hints, out);
	dd_fi.freeinfo(hints);
	return rc;
}


void dd_describe(struct fi_info *i, dd_infodesc *d) {
	memset(d, 0, sizeof *d);
	d->prov = i->fabric_attr && i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "";
	d->fabric = i->fabric_attr && i->fabric_attr->name ? i->fabric_attr->name : "";
	d->domain = i->domain_attr && i->domain_attr->name ? i->domain_attr->name : "";
	d->mode = i->mode;
	d->caps = i->caps;
	d->addr_format = i->addr_format;
	if (i->domain_attr) {
		d->mr_mode = (uint64_t)i->domain_attr->mr_mode;
		d->threading = i->domain_attr->threading;
		d->data_progress = i->domain_attr->data_progress;
		d->control_progress = i->domain_attr->control_progress;
		d->av_type = i->domain_attr->av_type;
		d->ep_cnt = i->domain_attr->ep_cnt;
		d->cq_cnt = i->domain_attr->cq_cnt;
		d->mr_key_size = i->domain_attr->mr_key_size;
	}
	if (i->tx_attr) d->tx_size = i->tx_attr->size;
	if (i->rx_attr) d->rx_size = i->rx_attr->size;
	if (i->ep_attr) d->max_msg_size = i->ep_attr->max_msg_size;
}

struct fi_info *dd_info_next(struct fi_info *i) { return i->next; }

struct fi_info *dd_dupinfo(struct fi_info *i) {
	struct fi_info *next = i->next;
	i->next = NULL;
	struct fi_info *d = dd_fi.dupinfo(i);
	i->next = next;
	return d;
}

// ---- fabric + domain ------------------------------------------------------

int dd_open_fabric(struct fi_info *info, struct fid_fabric **fab) {
	return dd_fi.fabric(info->fabric_attr, fab, NULL);
}

int dd_open_domain(struct fid_fabric *fab, struct fi_info *info, struct fid_domain **dom) {
	return fi_domain(fab, info, dom, NULL);
}

int dd_close(struct fid *f) { return f ? fi_close(f) : 0; }
int dd_close_fabric(struct fid_fabric *f) { return f ? fi_close(&f->fid) : 0; }
int dd_close_domain(struct fid_domain *d) { return d ? fi_close(&d->fid) : 0; }
int dd_close_mr(struct fid_mr *m) { return m ? fi_close(&m->fid) : 0; }

// stale_region_tries bounds dd_endpoint's tries past regions of dead
// processes (a rank opens two or three endpoints).
enum { stale_region_tries = 8 };

static int endpoint_once(struct fid_domain *dom, struct fi_info *info, size_t cq_size, size_t av_count,
		int wait_fd, int cq_format, struct fid_ep **ep, struct fid_cq **cq, struct fid_av **av, int *got_fd, const char **stage);

// dd_endpoint opens an endpoint with its own CQ and AV. wait_fd asks for a
// CQ with an FI_WAIT_FD wait object; if the provider refuses (shm: -38) the
// CQ is opened without one and *got_fd is left 0. cq_format is
// FI_CQ_FORMAT_CONTEXT (readers) or FI_CQ_FORMAT_TAGGED (the server, whose
// gather receives need the received length).
//
// shm names an endpoint's region /dev/shm/<pid>:<uid>:<n>, n counting the
// process's endpoints. A killed process leaves its regions behind; a later
// process given the same pid finds one under the name it wants, stamped
// with a live pid (its own), so fi_enable fails with -FI_EBUSY and the
// provider removes that file. The next try takes the next name.
int dd_endpoint(struct fid_domain *dom, struct fi_info *info, size_t cq_size, size_t av_count,
		int wait_fd, int cq_format, struct fid_ep **ep, struct fid_cq **cq, struct fid_av **av, int *got_fd, const char **stage) {
	int rc, tries;
	for (tries = 0; tries < stale_region_tries; tries++) {
		rc = endpoint_once(dom, info, cq_size, av_count, wait_fd, cq_format, ep, cq, av, got_fd, stage);
		if (rc != -FI_EBUSY || strcmp(*stage, "fi_enable") != 0) break;
	}
	return rc;
}

static int endpoint_once(struct fid_domain *dom, struct fi_info *info, size_t cq_size, size_t av_count,
		int wait_fd, int cq_format, struct fid_ep **ep, struct fid_cq **cq, struct fid_av **av, int *got_fd, const char **stage) {
	struct fi_cq_attr cqa;
	struct fi_av_attr ava;
	int rc;
	*ep = NULL; *cq = NULL; *av = NULL; *got_fd = 0;
	memset(&cqa, 0, sizeof cqa);
	cqa.format = cq_format;
	cqa.size = cq_size;
	cqa.wait_obj = FI_WAIT_NONE;
	rc = -FI_ENOSYS;
	if (wait_fd) {
		cqa.wait_obj = FI_WAIT_FD;
		rc = fi_cq_open(dom, &cqa, cq, NULL);
		if (rc == 0) *got_fd = 1;
	}
	if (rc != 0) {
		cqa.wait_obj = FI_WAIT_NONE;
		*stage = "fi_cq_open";
		rc = fi_cq_open(dom, &cqa, cq, NULL);
		if (rc) goto fail;
	}
	memset(&ava, 0, sizeof ava);
	ava.type = info->domain_attr->av_type;
	ava.count = av_count;
	*stage = "fi_av_open";
	rc = fi_av_open(dom, &ava, av, NULL);
	if (rc) goto fail;
	*stage = "fi_endpoint";
	rc = fi_endpoint(dom, info, ep, NULL);
	if (rc) goto fail;
	*stage = "fi_ep_bind(cq)";
	rc = fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV);
	if (rc) goto fail;
	*stage = "fi_ep_bind(av)";
	rc = fi_ep_bind(*ep, &(*av)->fid, 0);
	if (rc) goto fail;
	*stage = "fi_enable";
	rc = fi_enable(*ep);
	if (rc) goto fail;
	return 0;
fail:
	if (*ep) fi_close(&(*ep)->fid);
	if (*av) fi_close(&(*av)->fid);
	if (*cq) fi_close(&(*cq)->fid);
	*ep = NULL; *cq = NULL; *av = NULL;
	return rc;
}

// dd_mr_reg registers [buf, buf+len). With FI_MR_ENDPOINT the MR is bound to
// ep and enabled.
int dd_mr_reg(struct fid_domain *dom, struct fid_ep *ep, void *buf, size_t len, uint64_t access,
		uint64_t key, int bind_ep, struct fid_mr **mr, uint64_t *out_key, void **desc) {
	int rc = fi_mr_reg(dom, buf, len, access, 0, key, 0, mr, NULL);
	if (rc) { *mr = NULL; return rc; }
	if (bind_ep) {
		rc = fi_mr_bind(*mr, &ep->fid, 0);
		if (rc == 0) rc = fi_mr_enable(*mr);
		if (rc) { fi_close(&(*mr)->fid); *mr = NULL; return rc; }
	}
	*out_key = fi_mr_key(*mr);
	*desc = fi_mr_desc(*mr);
	return 0;
}

// dd_strerror is fi_strerror's text; before libfabric is loaded (or without
// it) the C library's, which covers the errno-valued codes.
const char *dd_strerror(int err) { return dd_fi.strerror ? dd_fi.strerror(err) : strerror(err); }

// dd_info_key_size is the provider's MR key size in bytes (0 when unknown).
uint64_t dd_info_key_size(struct fi_info *i) { return i->domain_attr ? i->domain_attr->mr_key_size : 0; }
