// dd_hmem.c: the GPUDirect probe: does the provider offer FI_HMEM, and
// does a registration of device memory succeed?
// Part of package fabric (compiled by cgo); see dd.h.

#include "dd.h"

// dd_hmem_offered asks fi_getinfo again for info's provider with FI_HMEM
// added to the capabilities (a primary capability: never reported unless
// asked for): 0 when info's domain comes back with it, else the getinfo
// code or -FI_ENODATA.
int dd_hmem_offered(struct fi_info *info) {
	struct fi_info *hints = dd_fi.dupinfo(NULL);
	if (!hints) return -FI_ENOMEM;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = DD_CAPS | FI_HMEM;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = DD_MR_MODES | FI_MR_HMEM;
	hints->domain_attr->threading = info->domain_attr->threading;
	hints->fabric_attr->prov_name = strdup(info->fabric_attr->prov_name);
	struct fi_info *got = NULL;
	int rc = dd_fi.getinfo(FI_VERSION(1, 11), NULL, NULL, 0, hints, &got);
	dd_fi.freeinfo(hints);
	int hmem = 0;
	for (struct fi_info *i = rc == 0 ? got : NULL; i; i = i->next) {
		if ((i->caps & FI_HMEM) && i->domain_attr && i->domain_attr->name && info->domain_attr->name &&
				strcmp(i->domain_attr->name, info->domain_attr->name) == 0) hmem = 1;
	}
	if (got) dd_fi.freeinfo(got);
	return hmem ? 0 : (rc ? rc : -FI_ENODATA);
}

// dd_hmem_probe checks dd_hmem_offered; unless info's domain offers FI_HMEM,
// it returns -FI_ENODATA. With it, it
// registers [addr, addr+len) of device memory of runtime iface
// (FI_HMEM_CUDA, FI_HMEM_ROCR) and device in dom (bound to ep with
// FI_MR_ENDPOINT) for local use as a read destination, and closes the
// registration again. *stage says which step failed: 1 getinfo, 2
// registration, 3 binding.
int dd_hmem_probe(struct fi_info *info, struct fid_domain *dom, struct fid_ep *ep, int bind_ep,
		uint64_t addr, size_t len, int iface, int device, int *stage) {
	*stage = 1;
	int rc = dd_hmem_offered(info);
	if (rc) return rc;

	*stage = 2;
	struct iovec iov = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };
	struct fi_mr_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.mr_iov = &iov;
	attr.iov_count = 1;
	attr.access = FI_READ | FI_WRITE;
	attr.iface = (enum fi_hmem_iface)iface;
	if (iface == FI_HMEM_CUDA) attr.device.cuda = device;
	struct fid_mr *mr = NULL;
	rc = fi_mr_regattr(dom, &attr, 0, &mr);
	if (rc) return rc;
	if (bind_ep) {
		*stage = 3;
		rc = fi_mr_bind(mr, &ep->fid, 0);
		if (rc == 0) rc = fi_mr_enable(mr);
	}
	fi_close(&mr->fid);
	return rc;
}
