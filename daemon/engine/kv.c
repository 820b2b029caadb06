/*
 * kv.c - KV page storage: one anonymous mapping of pages.
 *
 * The mapping is asked for transparent huge pages, since attention walks it
 * page by page and TLB misses would otherwise show.  Allocation of pages to
 * sequences is kvcache.c's; nothing here knows which page is in use.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kv.h"

struct pg_kv_store {
	struct pg_kv_layout layout;
	size_t map_bytes;
	int n_pages;
};

size_t pg_kv_page_bytes_for(int page_tokens, int n_blocks, int n_kv_heads,
			    int head_dim, enum pg_dtype type)
{
	return (size_t)page_tokens * n_blocks * 2 * n_kv_heads * head_dim *
	       pg_dtype_block_bytes(type);
}

int pg_kv_store_create(int n_pages, int page_tokens, int n_blocks,
		       int n_kv_heads, int head_dim, enum pg_dtype type,
		       struct pg_kv_store **out)
{
	struct pg_kv_store *s;
	void *base;

	if (n_pages < 1 || page_tokens < 1 || n_blocks < 1 ||
	    n_kv_heads < 1 || head_dim < 1 ||
	    (type != PG_F32 && type != PG_F16 && type != PG_BF16))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->layout = (struct pg_kv_layout){
		.page_bytes = pg_kv_page_bytes_for(page_tokens, n_blocks,
						   n_kv_heads, head_dim, type),
		.page_tokens = page_tokens,
		.n_blocks = n_blocks,
		.n_kv_heads = n_kv_heads,
		.head_dim = head_dim,
		.type = type,
	};
	s->map_bytes = s->layout.page_bytes * (size_t)n_pages;
	base = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		free(s);
		return -ENOMEM;
	}
	madvise(base, s->map_bytes, MADV_HUGEPAGE);
	s->layout.base = base;
	s->n_pages = n_pages;
	*out = s;
	return 0;
}

void pg_kv_store_destroy(struct pg_kv_store *s)
{
	if (!s)
		return;
	munmap(s->layout.base, s->map_bytes);
	free(s);
}

const struct pg_kv_layout *pg_kv_store_layout(const struct pg_kv_store *s)
{
	return &s->layout;
}

int pg_kv_store_n_pages(const struct pg_kv_store *s)
{
	return s->n_pages;
}

void pg_kv_store_copy(struct pg_kv_store *s, int32_t src, int32_t dst)
{
	size_t pb = s->layout.page_bytes;
	char *base = s->layout.base;

	memcpy(base + (size_t)dst * pb, base + (size_t)src * pb, pb);
}
