/*
 * test_registry.c - backends and communicators opened by kind
 * (kernels/registry.h), as the engine opens them.
 *
 * Checked: a CPU backend opens with its threads, kernel table and the
 * optional figures and packing ops; a bad PAGODA_CPU_KERNELS and llama.cpp
 * numerics below AVX2 are refused with a message that says what to do; a
 * CUDA device is refused clearly when this build has no CUDA (-ENOTSUP)
 * or the host no GPU (-ENODEV), and pg_gpu_count agrees; an unknown kind
 * is -EINVAL; device groups are refused without NCCL; after CPU backends,
 * no CUDA library is mapped (the CUDA module loads only when a GPU is
 * asked for); a host group of 2
 * ranks all-reduces across two threads.
 *
 * Exits 0 on success, 1 on failure.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/registry.h"
#include "tests/check.h"

static void test_cpu(void)
{
	struct pg_backend_spec s = {
		.kind = PG_BACKEND_CPU, .n_threads = 2, .isa = PG_ISA_TOP,
	};
	struct pg_backend *be = NULL;
	char err[512] = "";
	int rc = pg_backend_open(&s, &be, err, sizeof(err));

	CHECK(!rc && be, "cpu: %d %s", rc, err);
	if (!be)
		return;
	CHECK(!strcmp(be->ops->name, "cpu") && be->ops->host_memory,
	      "cpu: %s", be->ops->name);
	CHECK(be->ops->n_threads && be->ops->n_threads(be) == 2,
	      "cpu: threads");
	CHECK(be->ops->kernels &&
	      !strcmp(be->ops->kernels(be), pg_cpu_isa_name(pg_cpu_isa_best())),
	      "cpu: kernels %s, best %s",
	      be->ops->kernels ? be->ops->kernels(be) : "(none)",
	      pg_cpu_isa_name(pg_cpu_isa_best()));
	CHECK(be->ops->pack_bytes && be->ops->pack, "cpu: no packing ops");
	if (be->ops->pack_bytes) {
		struct pg_matrix m = {
			.type = PG_Q4_0, .n_rows = 8, .n_cols = 64,
			.row_bytes = 36,
		};
		size_t want = pg_cpu_isa_best() >= PG_ISA_AVX2 ? 8 * 36 : 0;

		CHECK(be->ops->pack_bytes(be, &m) == want,
		      "cpu: pack_bytes %zu, want %zu",
		      be->ops->pack_bytes(be, &m), want);
		m.type = PG_F32;
		m.row_bytes = 256;
		CHECK(!be->ops->pack_bytes(be, &m), "cpu: packs F32");
	}
	be->ops->destroy(be);

	/* a bad PAGODA_CPU_KERNELS is the caller's to fix, in words */
	setenv("PAGODA_CPU_KERNELS", "avx9000", 1);
	be = NULL;
	rc = pg_backend_open(&s, &be, err, sizeof(err));
	CHECK(rc == -EINVAL && !be && strstr(err, "PAGODA_CPU_KERNELS"),
	      "bad PAGODA_CPU_KERNELS: %d %s", rc, err);
	/* llama.cpp numerics reproduce llama.cpp's AVX2 build only */
	setenv("PAGODA_CPU_KERNELS", "scalar", 1);
	s.llama_numerics = 1;
	rc = pg_backend_open(&s, &be, err, sizeof(err));
	CHECK(rc == -ENOTSUP && !be && strstr(err, "AVX2") &&
	      strstr(err, "unset it"), "llama numerics, scalar: %d %s", rc, err);
	unsetenv("PAGODA_CPU_KERNELS");
	if (pg_cpu_isa_best() >= PG_ISA_AVX2) {
		rc = pg_backend_open(&s, &be, err, sizeof(err));
		CHECK(!rc && be, "llama numerics: %d %s", rc, err);
		if (be)
			be->ops->destroy(be);
	}
}

/* Whether a library whose file name holds name is mapped into this process. */
static int mapped(const char *name)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, name) != NULL;
	fclose(f);
	return found;
}

/* CPU backends opened, and nothing of CUDA is in the process. */
static void test_no_cuda_mapped(void)
{
	static const char *const libs[] = {
		"libcudart", "libcublas", "libnccl", "libcuda.so",
		"pagoda-cuda",
	};

	for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++)
		CHECK(!mapped(libs[i]), "a CPU-only process maps %s", libs[i]);
}

static void test_cuda(void)
{
	struct pg_backend_spec s = { .kind = PG_BACKEND_CUDA, .index = 0 };
	struct pg_backend *be = NULL;
	struct pg_gpu_info info;
	char err[512] = "";
	int n = pg_gpu_count(), rc;

	CHECK(n >= 0, "gpu count %d", n);
#ifdef HAVE_CUDA
	/* this build made pagoda-cuda.so: it loads, whether or not a GPU is here */
	rc = pg_gpu_info(0, &info, err, sizeof(err));
	CHECK(pg_backend_built(PG_BACKEND_CUDA), "the CUDA module does not load: %s",
	      err);
#endif
	if (!pg_backend_built(PG_BACKEND_CUDA)) {
		rc = pg_backend_open(&s, &be, err, sizeof(err));
		CHECK(rc == -ENOTSUP && !be && strstr(err, "--with-cuda"),
		      "cuda without CUDA: %d %s", rc, err);
		CHECK(n == 0, "gpus without CUDA: %d", n);
		CHECK(pg_gpu_info(0, &info, err, sizeof(err)) == -ENOTSUP &&
		      strstr(err, "--with-cuda"), "gpu info: %s", err);
	} else if (n == 0) {	/* built, but this host shows no GPU */
		rc = pg_backend_open(&s, &be, err, sizeof(err));
		CHECK(rc < 0 && !be && *err, "cuda without a GPU: %d %s", rc,
		      err);
	} else {
		CHECK(!pg_gpu_info(0, &info, err, sizeof(err)) &&
		      info.total_bytes >= info.free_bytes && info.total_bytes,
		      "gpu info: %s", err);
		s.index = n;	/* one past the last */
		rc = pg_backend_open(&s, &be, err, sizeof(err));
		CHECK(rc < 0 && !be && *err, "cuda:%d: %d %s", n, rc, err);
	}
	s.kind = (enum pg_backend_kind)7;
	rc = pg_backend_open(&s, &be, err, sizeof(err));
	CHECK(rc == -EINVAL && !be, "unknown kind: %d", rc);
	CHECK(pg_backend_built(PG_BACKEND_CPU), "no CPU backend");
	if (!pg_device_groups_built()) {
		/* no module: how to get one; a module without NCCL: NCCL */
		const char *why = pg_backend_built(PG_BACKEND_CUDA) ? "NCCL" :
				  "--with-cuda";
		unsigned char id[PG_DEVICE_GROUP_ID_BYTES];
		struct pg_comm *c = NULL;

		CHECK(pg_device_group_id(id, sizeof(id), err, sizeof(err)) ==
		      -ENOTSUP && strstr(err, why), "group id: %s", err);
		CHECK(pg_device_group_join(2, 0, id, NULL, 0, NULL, 0, &c, err,
					   sizeof(err)) == -ENOTSUP && !c &&
		      strstr(err, why), "group join: %s", err);
	}
}

struct rank {
	struct pg_host_group *g;
	int r;
	float v[3];
	int rc;
};

static void *rank_main(void *arg)
{
	struct rank *k = arg;
	struct pg_comm *c = pg_host_group_join(k->g, k->r);

	if (!c) {
		k->rc = -ENOMEM;
		return NULL;
	}
	k->rc = c->ops->all_reduce_sum(c, k->v, 3);
	c->ops->destroy(c);
	return NULL;
}

static void test_host_group(void)
{
	struct pg_host_group *g = NULL;
	struct rank k[2] = {
		{ .r = 0, .v = { 1, 2, 3 } }, { .r = 1, .v = { 10, 20, 30 } },
	};
	pthread_t t[2];

	CHECK(!pg_host_group_create(2, &g) && g, "host group");
	if (!g)
		return;
	pg_host_group_set_spin(g, 1000);
	for (int i = 0; i < 2; i++) {
		k[i].g = g;
		pthread_create(&t[i], NULL, rank_main, &k[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 2; i++)
		CHECK(!k[i].rc && k[i].v[0] == 11 && k[i].v[1] == 22 &&
		      k[i].v[2] == 33, "rank %d: %d %g %g %g", i, k[i].rc,
		      (double)k[i].v[0], (double)k[i].v[1], (double)k[i].v[2]);
	pg_host_group_destroy(g);
}

int main(void)
{
	unsetenv("PAGODA_CPU_KERNELS");
	test_cpu();
	test_no_cuda_mapped();
	test_cuda();
	test_host_group();
	if (failures) {
		fprintf(stderr, "test_registry: %d failed\n", (int)failures);
		return 1;
	}
	printf("test_registry: all passed\n");
	return 0;
}
