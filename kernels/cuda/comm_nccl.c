/*
 * comm_nccl.c - the communicator of comm.h over NCCL, for CUDA devices.
 *
 * Each operation enqueues one NCCL call on the handle's stream and polls
 * the communicator (ncclCommGetAsyncError) and the stream (cudaStreamQuery)
 * until the work is done, so that a call returns with its result in place,
 * as the shared-memory communicator's do, and so that abort() can stop a
 * wait that would never end: the communicators are non-blocking
 * (config.blocking = 0) and the waiting thread itself calls ncclCommAbort.
 * It is not a CUDA kernel file: nothing here runs on the device.
 *
 * Design for several hosts
 * ------------------------
 * One pagodad runs per host and owns that host's GPUs; one thread per
 * local GPU drives it, as for CPU ranks.  The plan numbers the ranks
 * globally, host by host (host h's devices are ranks base_h .. base_h +
 * n_h - 1), so that a tensor-parallel group stays inside a host (NVLink)
 * and only pipeline stages, which exchange less, cross hosts.
 *
 * 1. The coordinator (the daemon of rank 0's host) calls
 *    pg_comm_nccl_unique_id once per communicator (each tensor-parallel
 *    group, each pair of pipeline stages); NCCL's bootstrap root for that
 *    id then listens on this host.
 * 2. It sends every other host's daemon a "comm init" message over the
 *    admin socket: the group's name and size, the global ranks of that
 *    host's devices, and the PG_COMM_NCCL_ID_BYTES of the id.  For a
 *    cluster started by hand, without a coordinator, rank 0's host writes
 *    the id to a file on storage the others share (to a temporary name,
 *    then rename(2), so that no reader sees half an id) and the others wait
 *    for the file.  The id gives access to the bootstrap, not to data; the
 *    admin socket is the trusted channel.
 * 3. On every host, each rank's thread calls pg_comm_nccl_create with its
 *    global rank and local device: the ranks meet at rank 0's bootstrap over
 *    TCP (NCCL_SOCKET_IFNAME chooses the interface) and NCCL connects them
 *    over NVLink or PCIe inside a host and InfiniBand/RoCE or sockets
 *    between hosts.  Creation returns once all ranks have joined; the
 *    coordinator bounds it with a deadline and starts over (new id) when a
 *    host does not come.
 * 4. Failure: a rank that fails calls abort() on its groups, which marks
 *    the handles of this process only.  Its daemon reports the failure to
 *    the coordinator, which tells every other daemon to abort its handles
 *    too: NCCL does not carry an abort to the other ranks, which would
 *    otherwise wait until NCCL notices a broken connection (ncclRemoteError)
 *    or for ever.  Once every host has collected its ranks, the handles are
 *    destroyed everywhere and the group is created again from a fresh id,
 *    as in steps 1 to 3 (reset() cannot revive an aborted NCCL
 *    communicator, and NCCL's bootstrap root serves one initialisation per
 *    id); a host that does not answer is dropped from the plan.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>	/* streams, devices, cudaMalloc */
/* nccl.h declares a few functions as f() rather than f(void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>		/* the communicator */
#pragma GCC diagnostic pop

#include "common/clock.h"
#include "kernels/cuda/comm_nccl.h"

_Static_assert(sizeof(ncclUniqueId) == PG_COMM_NCCL_ID_BYTES,
	       "PG_COMM_NCCL_ID_BYTES is not NCCL's unique id size");

/*
 * Poll without sleeping this long (a collective between GPUs of one host
 * takes tens of microseconds), then nap between polls so that a long wait,
 * e.g. for a peer on another host, does not hold a CPU.
 */
#define NCCL_SPIN_NS 200000
#define NCCL_NAP_NS 20000

/* Creation takes seconds (topology, connections): poll it every 1 ms. */
#define NCCL_INIT_NAP_NS 1000000

struct nccl_comm {
	struct pg_comm base;
	ncclComm_t comm;	/* NULL once aborted or broken */
	cudaStream_t stream;	/* the caller's */
	int device;
	float *one;		/* device scratch of barrier(): (1) */
	ncclUniqueId id;	/* the group's: finds its other handles */
	_Atomic int aborted;	/* set by abort() on any handle of the group */
	struct nccl_comm *next;	/* in nccl_handles */
	char err[256];		/* the last failure's message */
};

/* This process's handles, so that abort() reaches a whole group. */
static pthread_mutex_t nccl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nccl_comm *nccl_handles;

static struct nccl_comm *nccl_of(struct pg_comm *c)
{
	return (struct nccl_comm *)c;
}

/* Sleep between polls once the first NCCL_SPIN_NS since start are over. */
static void nccl_nap(int64_t start)
{
	struct timespec ts = { 0, NCCL_NAP_NS };

	if ((int64_t)pg_now_ns() - start > NCCL_SPIN_NS)
		nanosleep(&ts, NULL);
}

/* Format a message into buf (len bytes, may be 0). */
static void __attribute__((format(printf, 3, 4)))
say(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!buf || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

/* Drop the communicator: it failed, or the group was aborted. */
static void nccl_drop(struct nccl_comm *c)
{
	if (c->comm)
		ncclCommAbort(c->comm);
	c->comm = NULL;
}

/* A CUDA call failed: the handle is broken.  Returns -EIO. */
static int cuda_fail(struct nccl_comm *c, const char *call, cudaError_t e)
{
	say(c->err, sizeof(c->err), "%s: %s (%s=%d)", call,
	    cudaGetErrorString(e), cudaGetErrorName(e), (int)e);
	nccl_drop(c);
	return -EIO;
}

/* An NCCL call or the communicator failed: broken.  Returns -EIO. */
static int nccl_fail(struct nccl_comm *c, const char *call, ncclResult_t r)
{
	const char *detail = ncclGetLastError(c->comm);

	say(c->err, sizeof(c->err), "%s: %s%s%s", call, ncclGetErrorString(r),
	    detail && *detail ? ": " : "", detail ? detail : "");
	nccl_drop(c);
	return -EIO;
}

static int nccl_cancel(struct nccl_comm *c)
{
	say(c->err, sizeof(c->err), "the group was aborted");
	nccl_drop(c);
	return -ECANCELED;
}

/* Before an operation: -ECANCELED once aborted, -EIO once broken. */
static int nccl_enter(struct nccl_comm *c)
{
	cudaError_t e;

	if (atomic_load(&c->aborted))
		return nccl_cancel(c);
	if (!c->comm) {
		say(c->err, sizeof(c->err),
		    "the communicator failed earlier; create it again");
		return -EIO;
	}
	e = cudaSetDevice(c->device);
	return e == cudaSuccess ? 0 : cuda_fail(c, "cudaSetDevice", e);
}

/* 1 while call's work is pending, 0 once done, or -errno. */
static int nccl_poll(struct nccl_comm *c, const char *call)
{
	ncclResult_t r, state;
	cudaError_t e;

	r = ncclCommGetAsyncError(c->comm, &state);
	if (r != ncclSuccess)
		return nccl_fail(c, "ncclCommGetAsyncError", r);
	if (state == ncclInProgress)
		return 1;
	if (state != ncclSuccess)
		return nccl_fail(c, call, state);
	e = cudaStreamQuery(c->stream);
	if (e == cudaErrorNotReady)
		return 1;
	return e == cudaSuccess ? 0 : cuda_fail(c, "cudaStreamQuery", e);
}

/*
 * nccl_finish - wait for the NCCL call `call` that returned r, and for
 * everything before it on the stream.  0, -EINVAL (NCCL refused the
 * arguments; on a non-blocking communicator NCCL also records that error
 * as the communicator's state, so the next operation fails with -EIO),
 * -EIO or -ECANCELED.
 */
static int nccl_finish(struct nccl_comm *c, const char *call, ncclResult_t r)
{
	int64_t start = pg_now_ns();
	int ret;

	if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
		say(c->err, sizeof(c->err), "%s: %s", call,
		    ncclGetErrorString(r));
		return -EINVAL;
	}
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_fail(c, call, r);
	while ((ret = nccl_poll(c, call)) > 0) {
		if (atomic_load(&c->aborted))
			return nccl_cancel(c);
		nccl_nap(start);
	}
	return ret;
}

/* -EINVAL unless peer is another rank of the group. */
static int nccl_check_peer(struct nccl_comm *c, int peer)
{
	if (peer >= 0 && peer < c->base.size && peer != c->base.rank)
		return 0;
	say(c->err, sizeof(c->err), "bad peer %d", peer);
	return -EINVAL;
}

static int nccl_all_reduce_sum(struct pg_comm *pc, float *buf, size_t n)
{
	struct nccl_comm *c = nccl_of(pc);
	struct pg_comm_stats *st = &pc->stats;
	int64_t t0 = pg_now_ns();
	int err;

	st->n_all_reduce++;
	err = nccl_enter(c);
	if (!err)
		err = nccl_finish(c, "ncclAllReduce",
				  ncclAllReduce(buf, buf, n, ncclFloat, ncclSum,
						c->comm, c->stream));
	if (!err) {
		st->bytes_out += (uint64_t)n * sizeof(float);
		st->bytes_in += (uint64_t)n * sizeof(float) *
				(uint64_t)(pc->size - 1);
	}
	st->wait_ns += (uint64_t)(pg_now_ns() - t0);
	return err;
}

static int nccl_all_gather(struct pg_comm *pc, const void *send, size_t bytes,
			   void *recv)
{
	struct nccl_comm *c = nccl_of(pc);
	struct pg_comm_stats *st = &pc->stats;
	int64_t t0 = pg_now_ns();
	int err;

	st->n_all_gather++;
	err = nccl_enter(c);
	if (!err)
		err = nccl_finish(c, "ncclAllGather",
				  ncclAllGather(send, recv, bytes, ncclUint8,
						c->comm, c->stream));
	if (!err) {
		st->bytes_out += bytes;
		st->bytes_in += (uint64_t)bytes * (uint64_t)(pc->size - 1);
	}
	st->wait_ns += (uint64_t)(pg_now_ns() - t0);
	return err;
}

static int nccl_send(struct pg_comm *pc, int peer, const void *buf,
		     size_t bytes)
{
	struct nccl_comm *c = nccl_of(pc);
	int64_t t0 = pg_now_ns();
	int err;

	pc->stats.n_send++;
	err = nccl_check_peer(c, peer);
	if (!err)
		err = nccl_enter(c);
	if (!err)
		err = nccl_finish(c, "ncclSend",
				  ncclSend(buf, bytes, ncclUint8, peer, c->comm,
					   c->stream));
	if (!err)
		pc->stats.bytes_out += bytes;
	pc->stats.wait_ns += (uint64_t)(pg_now_ns() - t0);
	return err;
}

static int nccl_recv(struct pg_comm *pc, int peer, void *buf, size_t bytes)
{
	struct nccl_comm *c = nccl_of(pc);
	int64_t t0 = pg_now_ns();
	int err;

	pc->stats.n_recv++;
	err = nccl_check_peer(c, peer);
	if (!err)
		err = nccl_enter(c);
	if (!err)
		err = nccl_finish(c, "ncclRecv",
				  ncclRecv(buf, bytes, ncclUint8, peer, c->comm,
					   c->stream));
	if (!err)
		pc->stats.bytes_in += bytes;
	pc->stats.wait_ns += (uint64_t)(pg_now_ns() - t0);
	return err;
}

/* An all-reduce of one float on the handle's scratch. */
static int nccl_barrier(struct pg_comm *pc)
{
	struct nccl_comm *c = nccl_of(pc);
	int64_t t0 = pg_now_ns();
	int err;

	err = nccl_enter(c);
	if (!err)
		err = nccl_finish(c, "ncclAllReduce (barrier)",
				  ncclAllReduce(c->one, c->one, 1, ncclFloat,
						ncclSum, c->comm, c->stream));
	pc->stats.wait_ns += (uint64_t)(pg_now_ns() - t0);
	return err;
}

/*
 * Mark every handle of c's group in this process; each one's own thread
 * aborts its communicator (ncclCommAbort is not called here: the owner may
 * be inside an NCCL call on it).
 */
static void nccl_abort(struct pg_comm *pc)
{
	struct nccl_comm *c = nccl_of(pc);

	pthread_mutex_lock(&nccl_lock);
	for (struct nccl_comm *h = nccl_handles; h; h = h->next)
		if (!memcmp(&h->id, &c->id, sizeof(h->id)))
			atomic_store(&h->aborted, 1);
	pthread_mutex_unlock(&nccl_lock);
}

/* Nothing to clear on a handle never aborted; an aborted one is gone. */
static int nccl_reset(struct pg_comm *pc)
{
	struct nccl_comm *c = nccl_of(pc);

	if (!atomic_load(&c->aborted) && c->comm)
		return 0;
	nccl_drop(c);
	say(c->err, sizeof(c->err), "an aborted or failed NCCL communicator "
	    "cannot be reset: create the group again from a new unique id");
	return -ENOTSUP;
}

/*
 * Finalise a healthy communicator (it flushes the communicator's own work;
 * an abort() of the group stops the wait) and free it; an aborted or
 * broken one is aborted.  The caller's stream is not queried: it may be
 * gone already (the backend that owned it destroyed first).
 */
static void nccl_finalize(struct nccl_comm *c)
{
	int64_t start = pg_now_ns();
	ncclResult_t r, state = ncclInProgress;

	if (nccl_enter(c))
		return;		/* aborted (dropped there) or broken */
	r = ncclCommFinalize(c->comm);
	while (r == ncclSuccess || r == ncclInProgress) {
		r = ncclCommGetAsyncError(c->comm, &state);
		if (r != ncclSuccess || state != ncclInProgress)
			break;
		if (atomic_load(&c->aborted))
			break;
		nccl_nap(start);
	}
	if (r == ncclSuccess && state == ncclSuccess) {
		ncclCommDestroy(c->comm);
		c->comm = NULL;
	}
	nccl_drop(c);		/* failed or aborted while finalising */
}

static void nccl_link(struct nccl_comm *c)
{
	pthread_mutex_lock(&nccl_lock);
	c->next = nccl_handles;
	nccl_handles = c;
	pthread_mutex_unlock(&nccl_lock);
}

static void nccl_unlink(struct nccl_comm *c)
{
	pthread_mutex_lock(&nccl_lock);
	for (struct nccl_comm **p = &nccl_handles; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	pthread_mutex_unlock(&nccl_lock);
}

static void nccl_destroy(struct pg_comm *pc)
{
	struct nccl_comm *c = nccl_of(pc);

	nccl_finalize(c);
	nccl_unlink(c);
	cudaFree(c->one);
	free(c);
}

static const struct pg_comm_ops nccl_ops = {
	.name = "nccl",
	.destroy = nccl_destroy,
	.all_reduce_sum = nccl_all_reduce_sum,
	.all_gather = nccl_all_gather,
	.send = nccl_send,
	.recv = nccl_recv,
	.barrier = nccl_barrier,
	.abort = nccl_abort,
	.reset = nccl_reset,
};

const char *pg_comm_nccl_error(const struct pg_comm *c)
{
	return ((const struct nccl_comm *)c)->err;
}

int pg_comm_nccl_unique_id(void *id, size_t len, char *err, size_t err_len)
{
	ncclResult_t r;

	if (!id || len < sizeof(ncclUniqueId)) {
		say(err, err_len, "a unique id needs %d bytes",
		    PG_COMM_NCCL_ID_BYTES);
		return -EINVAL;
	}
	r = ncclGetUniqueId((ncclUniqueId *)id);
	if (r != ncclSuccess) {
		say(err, err_len, "ncclGetUniqueId: %s", ncclGetErrorString(r));
		return -EIO;
	}
	return 0;
}

/* -EINVAL unless rank, size and device make sense (device is probed). */
static int nccl_check_args(int size, int rank, int device, char *err,
			   size_t err_len)
{
	cudaError_t e;
	int n_dev = 0;

	if (size < 1 || rank < 0 || rank >= size) {
		say(err, err_len, "rank %d of %d", rank, size);
		return -EINVAL;
	}
	e = cudaGetDeviceCount(&n_dev);
	if (e != cudaSuccess) {
		say(err, err_len, "cudaGetDeviceCount: %s",
		    cudaGetErrorString(e));
		return -EIO;
	}
	if (device < 0 || device >= n_dev) {
		say(err, err_len, "no CUDA device %d (%d present)", device,
		    n_dev);
		return -EINVAL;
	}
	return 0;
}

/* 0, or why the caller of pg_comm_nccl_join wants it to give up. */
static int nccl_give_up(const struct pg_comm_nccl_wait *w)
{
	if (!w)
		return 0;
	if (w->cancel && atomic_load(w->cancel))
		return -ECANCELED;
	if (w->deadline_ns && (int64_t)pg_now_ns() >= w->deadline_ns)
		return -ETIMEDOUT;
	return 0;
}

/*
 * Make c's non-blocking communicator and poll it until every rank has
 * joined, or until w says to give up: then abort the half-made one.
 */
static int nccl_init(struct nccl_comm *c, const struct pg_comm_nccl_wait *w,
		     char *err, size_t err_len)
{
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	ncclResult_t r, state = ncclInProgress;
	struct timespec nap = { 0, NCCL_INIT_NAP_NS };
	const char *detail;
	int quit = 0;

	config.blocking = 0;
	r = ncclCommInitRankConfig(&c->comm, c->base.size, c->id, c->base.rank,
				   &config);
	while (r == ncclSuccess || r == ncclInProgress) {
		if (!c->comm) {		/* not made, yet no error: NCCL's bug */
			r = ncclInternalError;
			break;
		}
		r = ncclCommGetAsyncError(c->comm, &state);
		if (r != ncclSuccess)
			break;
		if (state != ncclInProgress) {
			r = state;
			break;
		}
		if ((quit = nccl_give_up(w)))
			break;
		nanosleep(&nap, NULL);
	}
	if (!quit && r == ncclSuccess)
		return 0;
	if (quit == -ECANCELED)
		say(err, err_len, "ncclCommInitRankConfig (rank %d of %d): "
		    "given up, another rank failed", c->base.rank,
		    c->base.size);
	else if (quit == -ETIMEDOUT)
		say(err, err_len, "ncclCommInitRankConfig (rank %d of %d): "
		    "the other ranks did not all join in time", c->base.rank,
		    c->base.size);
	else {
		detail = ncclGetLastError(c->comm);
		say(err, err_len, "ncclCommInitRankConfig (rank %d of %d): "
		    "%s%s%s", c->base.rank, c->base.size,
		    ncclGetErrorString(r), detail && *detail ? ": " : "",
		    detail ? detail : "");
	}
	nccl_drop(c);		/* ncclCommAbort stops its initialisation */
	return quit ? quit : -EIO;
}

int pg_comm_nccl_join(int size, int rank, const void *id, int cuda_device,
		      void *stream, const struct pg_comm_nccl_wait *w,
		      struct pg_comm **out, char *err, size_t err_len)
{
	struct nccl_comm *c;
	cudaError_t e;
	int ret;

	if (!id || !out) {
		say(err, err_len, "no unique id or no handle");
		return -EINVAL;
	}
	*out = NULL;
	ret = nccl_check_args(size, rank, cuda_device, err, err_len);
	if (ret)
		return ret;
	if ((ret = nccl_give_up(w))) {
		say(err, err_len, "rank %d of %d: %s before joining", rank,
		    size, ret == -ECANCELED ? "given up, another rank failed,"
		    : "out of time");
		return ret;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		say(err, err_len, "out of host memory");
		return -ENOMEM;
	}
	c->base.ops = &nccl_ops;
	c->base.rank = rank;
	c->base.size = size;
	c->device = cuda_device;
	c->stream = (cudaStream_t)stream;
	memcpy(&c->id, id, sizeof(c->id));
	e = cudaSetDevice(cuda_device);
	if (e != cudaSuccess) {
		say(err, err_len, "cudaSetDevice(%d): %s (%s=%d)", cuda_device,
		    cudaGetErrorString(e), cudaGetErrorName(e), (int)e);
		ret = -EIO;
		goto out_free;
	}
	e = cudaMalloc((void **)&c->one, sizeof(float));
	if (e == cudaSuccess)	/* the barrier sums it: no garbage in NCCL */
		e = cudaMemset(c->one, 0, sizeof(float));
	if (e != cudaSuccess) {
		say(err, err_len, "cudaMalloc(4 bytes): %s (%s=%d)",
		    cudaGetErrorString(e), cudaGetErrorName(e), (int)e);
		cudaGetLastError();
		ret = e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
		goto out_free;
	}
	ret = nccl_init(c, w, err, err_len);
	if (ret)
		goto out_free_one;
	nccl_link(c);
	*out = &c->base;
	return 0;

out_free_one:
	cudaFree(c->one);
out_free:
	free(c);
	return ret;
}

int pg_comm_nccl_create(int size, int rank, const void *id, int cuda_device,
			void *stream, struct pg_comm **out, char *err,
			size_t err_len)
{
	return pg_comm_nccl_join(size, rank, id, cuda_device, stream, NULL,
				 out, err, err_len);
}
