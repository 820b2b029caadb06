/*
 * fuzz_gguf.c - fuzz target for the GGUF reader.
 *
 * Built two ways: with clang -fsanitize=fuzzer as a libFuzzer target
 * (tests/fuzz/run-libfuzzer), and as a plain program for make check that
 * replays the stored corpus (tests/fuzz/corpus/) and then mutates it for a
 * bounded number of rounds with a fixed seed, so that the check is
 * reproducible and cannot run away.  Under --enable-sanitizers the replay
 * runs with ASan and UBSan.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Touch everything an accepted file exposes, so bad bounds would show. */
static unsigned walk(const struct gguf_file *f)
{
	unsigned sum = 0;

	for (uint64_t i = 0; i < gguf_n_keys(f); i++) {
		struct gguf_str k = gguf_key_name(f, i);

		for (uint64_t j = 0; j < k.len; j++)
			sum += (uint8_t)k.ptr[j];
	}
	for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);

		if (t->n_bytes)
			sum += ((const uint8_t *)t->data)[0] +
			       ((const uint8_t *)t->data)[t->n_bytes - 1];
	}
	return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gguf_file *f = NULL;
	char err[256];
	volatile unsigned sink;

	if (gguf_open_mem(data, size, "fuzz", &f, err, sizeof(err)) == 0) {
		sink = walk(f);
		(void)sink;
		gguf_close(f);
	}
	return 0;
}

#ifndef PAGODA_LIBFUZZER

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* One random mutation of buf (len bytes, cap room): flip, set, cut, splice. */
static size_t mutate(uint8_t *buf, size_t len, size_t cap)
{
	static const uint8_t interesting[] = { 0, 1, 0x7f, 0x80, 0xff, 9, 8, 32 };
	size_t pos = len ? rnd() % len : 0;

	switch (rnd() % 5) {
	case 0:
		if (len)
			buf[pos] ^= (uint8_t)(1u << (rnd() % 8));
		return len;
	case 1:
		if (len)
			buf[pos] = interesting[rnd() % sizeof(interesting)];
		return len;
	case 2:
		return len ? rnd() % len : 0;
	case 3:
		if (len + 8 <= cap) {
			memmove(buf + pos + 8, buf + pos, len - pos);
			for (int i = 0; i < 8; i++)
				buf[pos + i] = (uint8_t)rnd();
			return len + 8;
		}
		return len;
	default:
		if (len >= 8) {
			uint64_t big = rnd() % 3 ? (uint64_t)1 << (rnd() % 64) : ~0ull;

			memcpy(buf + (pos & ~(size_t)7) % (len - 7), &big, 8);
		}
		return len;
	}
}

static uint8_t *read_file(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (!fp)
		return NULL;
	if (fseek(fp, 0, SEEK_END) == 0 && (n = ftell(fp)) >= 0 &&
	    fseek(fp, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
	    fread(buf, 1, (size_t)n, fp) == (size_t)n)
		*len = (size_t)n;
	else {
		free(buf);
		buf = NULL;
	}
	fclose(fp);
	return buf;
}

/* Replay one corpus file, then `rounds` chains of mutations of it. */
static void fuzz_file(const char *path, int rounds)
{
	size_t len = 0, cap;
	uint8_t *orig = read_file(path, &len), *buf;

	if (!orig) {
		fprintf(stderr, "fuzz_gguf: cannot read %s\n", path);
		exit(1);
	}
	LLVMFuzzerTestOneInput(orig, len);
	cap = len + 8 * 16;
	buf = malloc(cap);
	for (int r = 0; r < rounds && buf; r++) {
		size_t n = len;

		memcpy(buf, orig, len);
		for (int k = 1 + (int)(rnd() % 4); k > 0; k--)
			n = mutate(buf, n, cap);
		LLVMFuzzerTestOneInput(buf, n);
	}
	free(buf);
	free(orig);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/fuzz/corpus";
	int rounds = argc > 2 ? atoi(argv[2]) : 2000, n = 0;
	struct dirent *de;
	DIR *d = opendir(dir);
	char path[4096];

	if (!d) {
		fprintf(stderr, "fuzz_gguf: cannot open corpus directory %s\n", dir);
		return 1;
	}
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		fuzz_file(path, rounds);
		n++;
	}
	closedir(d);
	if (!n) {
		fprintf(stderr, "fuzz_gguf: the corpus %s is empty\n", dir);
		return 1;
	}
	printf("fuzz_gguf: %d corpus files, %d mutations each, no crash\n", n, rounds);
	return 0;
}

#endif
