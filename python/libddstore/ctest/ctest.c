/* ctest: the C ABI from C on one rank: add, get, get_batch, get_ranges,
 * update, query, errors, a loader epoch with leases, close twice, abandon. Every
 * value is checked against its pattern. Build and run: make python-ctest. */
#include "ddstore.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static int wait_call(uint64_t call, uint64_t *res, dds_error *err) {
	int rc;
	while ((rc = dds_wait(call, 100, res, err)) == DDS_AGAIN) {}
	return rc;
}

/* count_segments: telemetry segment files ("ddstore-*.tel") in dir. */
static int count_segments(const char *dir) {
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += strncmp(e->d_name, "ddstore-", 8) == 0 && strstr(e->d_name, ".tel") != NULL;
	if (d) closedir(d);
	return n;
}

static int32_t pat(int64_t row, int j) { return (int32_t)(row * 1000 + j); }

#define ROWS 300
#define ELEMS 6

int main(void) {
	dds_error err;
	uint64_t call, store = 0;
	if (dds_open_start("{\"telemetry\": false}", &call, &err) != DDS_OK || wait_call(call, &store, &err) != DDS_OK) {
		fprintf(stderr, "open: %s\n", err.msg);
		return 1;
	}
	int32_t info[4];
	CHECK(dds_info(store, info, &err) == DDS_OK && info[0] == 0 && info[1] == 1, "info %d/%d", info[0], info[1]);

	static int32_t data[ROWS * ELEMS];
	for (int i = 0; i < ROWS; i++)
		for (int j = 0; j < ELEMS; j++) data[i * ELEMS + j] = pat(i, j);
	CHECK(dds_add_start(store, "x", DDS_INT32, ELEMS, data, sizeof data, &call, &err) == DDS_OK &&
	      wait_call(call, NULL, &err) == DDS_OK, "add: %s", err.msg);
	memset(data, 0, sizeof data); /* the store has its own copy */

	char js[1024];
	CHECK(dds_query(store, "x", js, sizeof js, &err) == DDS_OK && strstr(js, "\"global_rows\":300"), "query: %s %s", js, err.msg);

	int32_t out[40 * ELEMS];
	CHECK(dds_get(store, "x", 17, 40, out, sizeof out, &err) == DDS_OK, "get: %s", err.msg);
	for (int i = 0; i < 40; i++)
		for (int j = 0; j < ELEMS; j++) CHECK(out[i * ELEMS + j] == pat(17 + i, j), "get row %d", 17 + i);

	/* The sliced form: no fabric on one rank, so done in the caller's thread (no call left). */
	call = 1;
	memset(out, 0, sizeof out);
	CHECK(dds_get_start(store, "x", 17, 40, out, sizeof out, 100, &call, &err) == DDS_OK && call == 0,
	      "get_start: %s", err.msg);
	for (int i = 0; i < 40; i++)
		for (int j = 0; j < ELEMS; j++) CHECK(out[i * ELEMS + j] == pat(17 + i, j), "get_start row %d", 17 + i);

	int64_t idx[5] = {299, 0, 150, 150, 7};
	CHECK(dds_get_batch(store, "x", idx, 5, out, sizeof out, &err) == DDS_OK, "get_batch: %s", err.msg);
	for (int i = 0; i < 5; i++)
		for (int j = 0; j < ELEMS; j++) CHECK(out[i * ELEMS + j] == pat(idx[i], j), "get_batch row %ld", (long)idx[i]);

	int64_t starts[3] = {290, 3, 100}, counts[3] = {10, 0, 4};
	CHECK(dds_get_ranges(store, "x", starts, counts, 3, out, sizeof out, &err) == DDS_OK, "get_ranges: %s", err.msg);
	int k = 0;
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < counts[r]; i++, k++)
			for (int j = 0; j < ELEMS; j++) CHECK(out[k * ELEMS + j] == pat(starts[r] + i, j), "range %d row %d", r, i);

	int32_t upd[ELEMS] = {-1, -2, -3, -4, -5, -6};
	CHECK(dds_update(store, "x", upd, sizeof upd, 5, &err) == DDS_OK, "update: %s", err.msg);
	CHECK(dds_get(store, "x", 5, 1, out, sizeof out, &err) == DDS_OK && out[0] == -1 && out[5] == -6, "update read back");
	for (int j = 0; j < ELEMS; j++) upd[j] = pat(5, j);
	dds_update(store, "x", upd, sizeof upd, 5, &err);

	/* Errors: code and message. */
	CHECK(dds_get(store, "x", 299, 2, out, sizeof out, &err) == DDS_ERR_INDEX && err.code == DDS_ERR_INDEX &&
	      strstr(err.msg, "\"x\""), "index error: %d %s", err.code, err.msg);
	CHECK(dds_get(store, "nope", 0, 1, out, sizeof out, &err) == DDS_ERR_UNKNOWN_VAR, "unknown var: %s", err.msg);
	CHECK(dds_get(store, "x", 0, 10, out, 8, &err) == DDS_ERR_SHORT, "short: %s", err.msg);
	CHECK(dds_get(0, "x", 0, 1, out, sizeof out, &err) == DDS_ERR_INVALID, "handle 0: %s", err.msg);
	CHECK(dds_get(store + 1000, "x", 0, 1, out, sizeof out, &err) == DDS_ERR_INVALID, "bad handle: %s", err.msg);
	CHECK(dds_add_start(store, "x", DDS_INT32, ELEMS, upd, sizeof upd, &call, &err) == DDS_OK &&
	      wait_call(call, NULL, &err) == DDS_ERR_EXISTS, "exists: %s", err.msg);
	CHECK(dds_add_start(store, "y", 42, 1, upd, sizeof upd, &call, &err) == DDS_OK &&
	      wait_call(call, NULL, &err) == DDS_ERR_DTYPE, "dtype: %s", err.msg);

	/* Loader: every row once per epoch, in batches of 32, leases. */
	uint64_t loader, ep;
	CHECK(dds_loader_new(store, "{\"vars\":[\"x\"],\"batch_size\":32,\"shuffle\":true,\"seed\":5,\"workers\":1,\"prefetch\":2}",
	                     &loader, &err) == DDS_OK, "loader: %s", err.msg);
	int64_t len[3];
	dds_loader_len(loader, len, &err);
	CHECK(len[0] == ROWS && len[1] == (ROWS + 31) / 32, "loader len %ld %ld", (long)len[0], (long)len[1]);
	CHECK(dds_loader_epoch(loader, 0, NULL, -1, &ep, &err) == DDS_OK, "epoch: %s", err.msg);
	static int seen[ROWS];
	int64_t ind[32];
	dds_batch b = {.indices = ind, .indices_cap = 32};
	int rc, nb = 0;
	uint64_t first = 0;
	while ((rc = dds_epoch_next(ep, 100, &b, &err)) != DDS_EOF) {
		if (rc == DDS_AGAIN) continue;
		CHECK(rc == DDS_OK, "next: %s", err.msg);
		if (rc != DDS_OK) break;
		CHECK(b.number == nb && b.nvars == 1 && b.nbytes[0] == b.rows * ELEMS * 4, "batch %d", nb);
		const int32_t *d = b.data[0];
		for (int i = 0; i < b.rows; i++) {
			seen[ind[i]]++;
			for (int j = 0; j < ELEMS; j++) CHECK(d[i * ELEMS + j] == pat(ind[i], j), "batch %d row %ld", nb, (long)ind[i]);
		}
		if (nb == 0) {
			first = b.batch; /* hold the first batch over the epoch */
			CHECK(dds_batch_retain(first, &err) == DDS_OK, "retain");
			CHECK(dds_batch_release(first, &err) == DDS_OK, "release 1 of 2");
		} else {
			CHECK(dds_batch_release(b.batch, &err) == DDS_OK, "release: %s", err.msg);
		}
		nb++;
	}
	for (int i = 0; i < ROWS; i++) CHECK(seen[i] == 1, "row %d seen %d times", i, seen[i]);
	CHECK(dds_batch_release(first, &err) == DDS_OK, "last release");
	CHECK(dds_batch_release(first, &err) == DDS_ERR_INVALID, "release after the last: %d", err.code);
	dds_epoch_close(ep, &err);
	dds_handle_free(ep);
	CHECK(dds_loader_close(loader, &err) == DDS_OK, "loader close");
	dds_handle_free(loader);

	CHECK(dds_close_start(store, &call, &err) == DDS_OK && wait_call(call, NULL, &err) == DDS_OK, "close: %s", err.msg);
	CHECK(dds_close_start(store, &call, &err) == DDS_OK && wait_call(call, NULL, &err) == DDS_ERR_CLOSED, "close twice: %d %s", err.code, err.msg);
	CHECK(dds_get(store, "x", 0, 1, out, sizeof out, &err) == DDS_ERR_CLOSED, "get after close: %d %s", err.code, err.msg);
	dds_handle_free(store);

	/* Abandon: a store with a telemetry segment in a directory of its own;
	 * the segment is gone at once, and the store is closed after it. */
	char dir[] = "/tmp/ddstore-ctest.XXXXXX", opts[256];
	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	snprintf(opts, sizeof opts, "{\"telemetry\": true, \"telemetry_dir\": \"%s\"}", dir);
	CHECK(dds_open_start(opts, &call, &err) == DDS_OK && wait_call(call, &store, &err) == DDS_OK, "open with telemetry: %s", err.msg);
	CHECK(count_segments(dir) == 1, "%d segments in %s after open, want 1", count_segments(dir), dir);
	CHECK(dds_abandon(store, &err) == DDS_OK, "abandon: %s", err.msg);
	CHECK(count_segments(dir) == 0, "%d segments in %s after abandon, want 0", count_segments(dir), dir);
	CHECK(dds_abandon(store, &err) == DDS_ERR_CLOSED, "abandon twice: %d", err.code);
	CHECK(dds_close_start(store, &call, &err) == DDS_OK && wait_call(call, NULL, &err) == DDS_ERR_CLOSED, "close after abandon: %d", err.code);
	dds_handle_free(store);
	rmdir(dir);
	if (failures) {
		fprintf(stderr, "ctest: %d failures\n", failures);
		return 1;
	}
	printf("ctest: ok\n");
	return 0;
}
