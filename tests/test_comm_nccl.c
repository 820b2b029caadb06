/*
 * test_comm_nccl.c - the NCCL communicator (kernels/cuda/comm_nccl.c) on
 * the GPUs of this machine, one rank per GPU, the ranks as threads:
 * all-reduce (checked exactly, on sums that no order can round), all-gather
 * separate and in place, a ring of send/recv (with two GPUs or more), the
 * barrier, stats, bad arguments, and abort (of ranks blocked in a
 * collective, then of every later call) with reset refusing (-ENOTSUP).
 * Then creation that gives up (pg_comm_nccl_join): rank 0 of a group of
 * two whose rank 1 never comes stops at its deadline (-ETIMEDOUT) or when
 * another thread sets the cancel flag (-ECANCELED), in bounded time; and a
 * healthy handle destroyed after its stream (as pagodad's teardown does).
 *
 * Built only when configure found NCCL.  Exits 77 when there is no GPU,
 * 0 on success, 1 on failure.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "common/clock.h"
#include "kernels/cuda/comm_nccl.h"
#include "tests/check.h"

#define MAX_GPUS 8
#define N_FLOATS (1 << 20)
#define GATHER_BYTES 4099
#define RING_BYTES (1 << 20)

struct group {
	int size;
	unsigned char id[PG_COMM_NCCL_ID_BYTES];
	pthread_barrier_t sync;		/* the ranks */
};

struct rank_arg {
	struct group *grp;
	int rank;
	pthread_t tid;
};

/* A device buffer of `bytes`, or exit. */
static void *dev_alloc(size_t bytes)
{
	void *p = NULL;
	cudaError_t e = cudaMalloc(&p, bytes);

	if (e != cudaSuccess) {
		fprintf(stderr, "cudaMalloc: %s\n", cudaGetErrorString(e));
		exit(1);
	}
	return p;
}

static void copy(void *dst, const void *src, size_t bytes,
		 enum cudaMemcpyKind kind)
{
	cudaError_t e = cudaMemcpy(dst, src, bytes, kind);

	if (e != cudaSuccess) {
		fprintf(stderr, "cudaMemcpy: %s\n", cudaGetErrorString(e));
		exit(1);
	}
}

/* Small integers: every order of summation gives the same float. */
static void check_all_reduce(struct pg_comm *c)
{
	float *h = xmalloc(N_FLOATS * sizeof(float));	/* (N_FLOATS) */
	float *d = dev_alloc(N_FLOATS * sizeof(float));
	float tri = (float)(c->size * (c->size + 1) / 2);
	size_t bad = 0;
	int err;

	for (size_t i = 0; i < N_FLOATS; i++)
		h[i] = (float)((c->rank + 1) * (int)(i % 97));
	copy(d, h, N_FLOATS * sizeof(float), cudaMemcpyHostToDevice);
	err = c->ops->all_reduce_sum(c, d, N_FLOATS);
	CHECK(err == 0, "all_reduce: %d %s", err, pg_comm_nccl_error(c));
	copy(h, d, N_FLOATS * sizeof(float), cudaMemcpyDeviceToHost);
	for (size_t i = 0; i < N_FLOATS; i++)
		bad += h[i] != tri * (float)(i % 97);
	CHECK(!bad, "all_reduce: %zu wrong on rank %d", bad, c->rank);
	cudaFree(d);
	free(h);
}

static unsigned char gather_byte(int rank, size_t i)
{
	return (unsigned char)(rank * 59 + i * 3 + i / 255);
}

static void check_all_gather(struct pg_comm *c)
{
	size_t all = (size_t)c->size * GATHER_BYTES, bad;
	unsigned char *h = xmalloc(all);		/* (size, GATHER_BYTES) */
	unsigned char *send = dev_alloc(GATHER_BYTES);
	unsigned char *recv = dev_alloc(all);
	unsigned char *mine;
	int err;

	for (size_t i = 0; i < GATHER_BYTES; i++)
		h[i] = gather_byte(c->rank, i);
	for (int in_place = 0; in_place < 2; in_place++) {
		mine = in_place ? recv + (size_t)c->rank * GATHER_BYTES : send;
		copy(mine, h, GATHER_BYTES, cudaMemcpyHostToDevice);
		err = c->ops->all_gather(c, mine, GATHER_BYTES, recv);
		CHECK(err == 0, "all_gather: %d %s", err, pg_comm_nccl_error(c));
		copy(h, recv, all, cudaMemcpyDeviceToHost);
		bad = 0;
		for (int r = 0; r < c->size; r++)
			for (size_t i = 0; i < GATHER_BYTES; i++)
				bad += h[(size_t)r * GATHER_BYTES + i] !=
				       gather_byte(r, i);
		CHECK(!bad, "all_gather (in place %d): %zu wrong", in_place,
		      bad);
		for (size_t i = 0; i < GATHER_BYTES; i++)
			h[i] = gather_byte(c->rank, i);
	}
	cudaFree(send);
	cudaFree(recv);
	free(h);
}

/* A message goes round the ring; rank 0 sends first. */
static void check_ring(struct pg_comm *c)
{
	unsigned char *h = xmalloc(RING_BYTES);
	unsigned char *d = dev_alloc(RING_BYTES);
	int next = (c->rank + 1) % c->size;
	int prev = (c->rank + c->size - 1) % c->size;
	size_t bad = 0;
	int err;

	for (size_t i = 0; i < RING_BYTES; i++)
		h[i] = (unsigned char)(i * 7 + i / 253);
	if (c->rank == 0) {
		copy(d, h, RING_BYTES, cudaMemcpyHostToDevice);
		err = c->ops->send(c, next, d, RING_BYTES);
		CHECK(err == 0, "send: %d %s", err, pg_comm_nccl_error(c));
	}
	cudaMemset(d, 0, RING_BYTES);
	err = c->ops->recv(c, prev, d, RING_BYTES);
	CHECK(err == 0, "recv: %d %s", err, pg_comm_nccl_error(c));
	if (c->rank != 0) {
		err = c->ops->send(c, next, d, RING_BYTES);
		CHECK(err == 0, "send: %d %s", err, pg_comm_nccl_error(c));
	}
	copy(h, d, RING_BYTES, cudaMemcpyDeviceToHost);
	for (size_t i = 0; i < RING_BYTES; i++)
		bad += h[i] != (unsigned char)(i * 7 + i / 253);
	CHECK(!bad, "ring: %zu bytes wrong on rank %d", bad, c->rank);
	cudaFree(d);
	free(h);
}

static void check_stats(struct pg_comm *c)
{
	const struct pg_comm_stats *st = &c->stats;
	uint64_t peers = (uint64_t)c->size - 1, p2p = c->size > 1;

	CHECK(st->n_all_reduce == 1 && st->n_all_gather == 2,
	      "stats: %llu all_reduce, %llu all_gather",
	      (unsigned long long)st->n_all_reduce,
	      (unsigned long long)st->n_all_gather);
	CHECK(st->n_send == p2p + 1 && st->n_recv == p2p + 1,
	      "stats: send/recv (the bad peers count)");
	CHECK(st->bytes_out == N_FLOATS * 4 + 2 * GATHER_BYTES +
	      p2p * RING_BYTES, "stats: bytes_out %llu",
	      (unsigned long long)st->bytes_out);
	CHECK(st->bytes_in == (N_FLOATS * 4 + 2 * GATHER_BYTES) * peers +
	      p2p * RING_BYTES, "stats: bytes_in %llu",
	      (unsigned long long)st->bytes_in);
	CHECK(st->wait_ns > 0, "stats: wait_ns");
}

/* Ranks other than 0 block in an all-reduce; rank 0 aborts the group. */
static void check_abort(struct pg_comm *c, pthread_barrier_t *sync)
{
	struct timespec nap = { 0, 50 * 1000 * 1000 };
	float *d = dev_alloc(sizeof(float));
	int err;

	if (c->rank == 0) {
		nanosleep(&nap, NULL);
		c->ops->abort(c);
	} else {
		err = c->ops->all_reduce_sum(c, d, 1);
		CHECK(err == -ECANCELED, "blocked all_reduce after abort: %d",
		      err);
	}
	pthread_barrier_wait(sync);
	err = c->ops->barrier(c);
	CHECK(err == -ECANCELED, "barrier after abort: %d", err);
	err = c->ops->reset(c);
	CHECK(err == -ENOTSUP, "reset after abort: %d", err);
	cudaFree(d);
}

static void *rank_main(void *p)
{
	struct rank_arg *a = p;
	struct group *grp = a->grp;
	struct pg_comm *c = NULL;
	cudaStream_t stream;
	char msg[256];
	int err;

	if (cudaSetDevice(a->rank) != cudaSuccess ||
	    cudaStreamCreate(&stream) != cudaSuccess) {
		CHECK(0, "rank %d: no stream", a->rank);
		exit(1);
	}
	err = pg_comm_nccl_create(grp->size, a->rank, grp->id, a->rank, stream,
				  &c, msg, sizeof(msg));
	if (err) {
		fprintf(stderr, "pg_comm_nccl_create: %d %s\n", err, msg);
		exit(1);
	}
	CHECK(!strcmp(c->ops->name, "nccl"), "name %s", c->ops->name);
	check_all_reduce(c);
	check_all_gather(c);
	if (grp->size > 1)
		check_ring(c);
	CHECK(c->ops->barrier(c) == 0, "barrier: %s", pg_comm_nccl_error(c));
	CHECK(c->ops->send(c, c->rank, msg, 1) == -EINVAL, "send to self");
	CHECK(c->ops->recv(c, grp->size, msg, 1) == -EINVAL, "recv from size");
	check_stats(c);
	CHECK(c->ops->reset(c) == 0, "reset of a healthy handle");
	pthread_barrier_wait(&grp->sync);
	check_abort(c, &grp->sync);
	c->ops->destroy(c);
	cudaStreamDestroy(stream);
	return NULL;
}

struct canceller {
	atomic_int *flag;
	int64_t after_ns;
};

static void *cancel_later(void *p)
{
	struct canceller *k = p;
	struct timespec nap = { k->after_ns / 1000000000,
				k->after_ns % 1000000000 };

	nanosleep(&nap, NULL);
	atomic_store(k->flag, 1);
	return NULL;
}

/*
 * Rank 0 of two on device 0; rank 1 never joins.  Without a deadline or a
 * flag this would wait for ever: here it must give up, say why, and leave
 * *out NULL.
 */
static void check_join_gives_up(void)
{
	unsigned char id[PG_COMM_NCCL_ID_BYTES];
	struct pg_comm_nccl_wait w = { 0 };
	struct canceller k;
	struct pg_comm *c;
	atomic_int flag = 0;
	pthread_t tid;
	char msg[256];
	int64_t t0, took;
	int err;

	/* the deadline: 1 s */
	CHECK(pg_comm_nccl_unique_id(id, sizeof(id), msg, sizeof(msg)) == 0,
	      "unique id: %s", msg);
	w.deadline_ns = pg_now_ns() + 1000000000;
	c = (struct pg_comm *)&w;
	msg[0] = 0;
	t0 = pg_now_ns();
	err = pg_comm_nccl_join(2, 0, id, 0, NULL, &w, &c, msg, sizeof(msg));
	took = pg_now_ns() - t0;
	CHECK(err == -ETIMEDOUT && !c && msg[0],
	      "join past its deadline: %d (%s)", err, msg);
	CHECK(took >= 900000000 && took < 30000000000,
	      "join past its deadline took %.3f s", took / 1e9);
	printf("deadline: %s (%.2f s)\n", msg, took / 1e9);

	/* the flag, set by another thread after 0.2 s */
	CHECK(pg_comm_nccl_unique_id(id, sizeof(id), msg, sizeof(msg)) == 0,
	      "unique id: %s", msg);
	w.cancel = &flag;
	w.deadline_ns = pg_now_ns() + 60000000000;
	k = (struct canceller){ .flag = &flag, .after_ns = 200000000 };
	pthread_create(&tid, NULL, cancel_later, &k);
	msg[0] = 0;
	t0 = pg_now_ns();
	err = pg_comm_nccl_join(2, 0, id, 0, NULL, &w, &c, msg, sizeof(msg));
	took = pg_now_ns() - t0;
	pthread_join(tid, NULL);
	CHECK(err == -ECANCELED && !c && msg[0],
	      "join cancelled: %d (%s)", err, msg);
	CHECK(took >= 150000000 && took < 30000000000,
	      "join cancelled took %.3f s", took / 1e9);
	printf("cancelled: %s (%.2f s)\n", msg, took / 1e9);

	/* the flag already set: NCCL is not even asked */
	err = pg_comm_nccl_join(2, 0, id, 0, NULL, &w, &c, msg, sizeof(msg));
	CHECK(err == -ECANCELED && !c, "join with the flag set: %d", err);
}

/* A one-rank group, used, then destroyed after its stream is gone. */
static void check_destroy_after_stream(void)
{
	unsigned char id[PG_COMM_NCCL_ID_BYTES];
	struct pg_comm_nccl_wait w = { 0 };
	atomic_int flag = 0;
	struct pg_comm *c = NULL;
	cudaStream_t stream;
	float *d = dev_alloc(16 * sizeof(float));
	char msg[256];
	int err;

	if (cudaSetDevice(0) != cudaSuccess ||
	    cudaStreamCreate(&stream) != cudaSuccess) {
		CHECK(0, "no stream on device 0");
		return;
	}
	w.cancel = &flag;
	w.deadline_ns = pg_now_ns() + 60000000000;
	CHECK(pg_comm_nccl_unique_id(id, sizeof(id), msg, sizeof(msg)) == 0,
	      "unique id: %s", msg);
	err = pg_comm_nccl_join(1, 0, id, 0, stream, &w, &c, msg, sizeof(msg));
	CHECK(err == 0 && c, "join of one rank: %d %s", err, msg);
	if (!c)
		return;
	err = c->ops->all_reduce_sum(c, d, 16);
	CHECK(err == 0, "all_reduce of one rank: %d %s", err,
	      pg_comm_nccl_error(c));
	cudaStreamDestroy(stream);
	c->ops->destroy(c);
	cudaFree(d);
}

static void check_bad_args(void)
{
	unsigned char id[PG_COMM_NCCL_ID_BYTES] = { 0 };
	struct pg_comm *c = NULL;
	char msg[128];

	CHECK(pg_comm_nccl_unique_id(id, 16, msg, sizeof(msg)) == -EINVAL,
	      "short unique id");
	CHECK(pg_comm_nccl_create(2, 2, id, 0, NULL, &c, msg, sizeof(msg)) ==
	      -EINVAL, "rank 2 of 2");
	CHECK(pg_comm_nccl_create(1, 0, id, 1000, NULL, &c, msg, 0) ==
	      -EINVAL, "device 1000");
}

int main(void)
{
	struct rank_arg a[MAX_GPUS];
	struct group grp;
	char msg[256];
	int n_dev = 0, err;

	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
		printf("no CUDA device: skipped\n");
		return 77;
	}
	grp.size = n_dev < MAX_GPUS ? n_dev : MAX_GPUS;
	check_bad_args();
	err = pg_comm_nccl_unique_id(grp.id, sizeof(grp.id), msg, sizeof(msg));
	if (err) {
		fprintf(stderr, "pg_comm_nccl_unique_id: %s\n", msg);
		return 1;
	}
	pthread_barrier_init(&grp.sync, NULL, (unsigned)grp.size);
	for (int r = 0; r < grp.size; r++) {
		a[r] = (struct rank_arg){ .grp = &grp, .rank = r };
		pthread_create(&a[r].tid, NULL, rank_main, &a[r]);
	}
	for (int r = 0; r < grp.size; r++)
		pthread_join(a[r].tid, NULL);
	pthread_barrier_destroy(&grp.sync);
	check_destroy_after_stream();
	check_join_gives_up();
	printf("%d GPU%s: %s\n", grp.size, grp.size > 1 ? "s" : "",
	       failures ? "FAILED" : "ok");
	return failures ? 1 : 0;
}
