/*
 * vocab_util.h - what the tokenizer tests share: a model file's tokenizer
 * read from its vocabulary alone, and the parsers of the reference files
 * that tests/ref/gen-tokenizer*-ref.py write (hex texts, id lists).
 * Header-only, for tests.
 */
#ifndef PAGODA_TESTS_VOCAB_UTIL_H
#define PAGODA_TESTS_VOCAB_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/engine/gguf.h"
#include "daemon/engine/tokenizer.h"

/*
 * vocab_only_load - the tokenizer of path's tokenizer.ggml.* keys, read
 * from a private copy of its mapping with the tensor count zeroed, so that
 * tensors this build cannot load do not stop it.  Returns 0 with *out set;
 * -ENOENT when the file is absent or unreadable; -EINVAL with a message in
 * err when its header or vocabulary is refused.
 */
static inline int vocab_only_load(const char *path, struct pg_tokenizer **out,
				  char *err, size_t err_len)
{
	struct gguf_file *f;
	struct stat st;
	void *m = MAP_FAILED;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = -EINVAL;

	*out = NULL;
	if (fd >= 0 && !fstat(fd, &st) && st.st_size >= 24)
		m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE, fd, 0);
	if (fd >= 0)
		close(fd);
	if (m == MAP_FAILED) {
		snprintf(err, err_len, "%.400s: absent or unreadable", path);
		return -ENOENT;
	}
	memset((char *)m + 8, 0, 8);	/* n_tensors: the header's third field */
	if (!gguf_open_mem(m, (size_t)st.st_size, path, &f, err, err_len)) {
		if (!pg_tokenizer_load(f, out, err, err_len))
			rc = 0;
		gguf_close(f);
	}
	munmap(m, (size_t)st.st_size);
	return rc;
}

static inline int vocab_hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* ref_hex_text - the bytes of a hex text (up to the line's end) into a new
   NUL-terminated *text of *len bytes; -1 when it is not hex. */
static inline int ref_hex_text(const char *hex, char **text, size_t *len)
{
	size_t n = strcspn(hex, "\r\n");

	*text = NULL;
	*len = 0;
	if (n % 2)
		return -1;
	if (!(*text = malloc(n / 2 + 1)))
		abort();
	*len = n / 2;
	(*text)[n / 2] = 0;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = vocab_hexval(hex[2 * i]), lo = vocab_hexval(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		(*text)[i] = (char)(hi << 4 | lo);
	}
	return 0;
}

/* ref_id_list - the decimal ids of s into a new *ids of *n_ids. */
static inline void ref_id_list(char *s, int32_t **ids, int64_t *n_ids)
{
	size_t cap = 16;
	char *end;

	if (!(*ids = malloc(cap * sizeof(**ids))))
		abort();
	*n_ids = 0;
	for (;;) {
		long v = strtol(s, &end, 10);

		if (end == s)
			break;
		if ((size_t)*n_ids == cap && !(*ids = realloc(*ids, (cap *= 2) * sizeof(**ids))))
			abort();
		(*ids)[(*n_ids)++] = (int32_t)v;
		s = end;
	}
}

#endif
