/*
 * kv.c - KV page pool: one anonymous mapping of pages, a stack of free ids.
 *
 * The mapping is asked for transparent huge pages, since attention walks it
 * page by page and TLB misses would otherwise show.  The serving engine's
 * sharing, prefix hashing and eviction build on top of this; they are not
 * here.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "kv.h"

struct pg_kv_pool {
	struct pg_kv_layout layout;
	size_t map_bytes;
	int n_pages;
	int n_free;
	int32_t *free_ids;	/* stack: free_ids[0 .. n_free - 1] */
};

size_t pg_kv_page_bytes_for(int page_tokens, int n_blocks, int n_kv_heads,
			    int head_dim, enum pg_dtype type)
{
	return (size_t)page_tokens * n_blocks * 2 * n_kv_heads * head_dim *
	       pg_dtype_block_bytes(type);
}

int pg_kv_pool_create(int n_pages, int page_tokens, int n_blocks,
		      int n_kv_heads, int head_dim, enum pg_dtype type,
		      struct pg_kv_pool **out)
{
	struct pg_kv_pool *p;
	void *base;

	if (n_pages < 1 || page_tokens < 1 || n_blocks < 1 ||
	    n_kv_heads < 1 || head_dim < 1 ||
	    (type != PG_F32 && type != PG_F16 && type != PG_BF16))
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->layout = (struct pg_kv_layout){
		.page_bytes = pg_kv_page_bytes_for(page_tokens, n_blocks,
						   n_kv_heads, head_dim, type),
		.page_tokens = page_tokens,
		.n_blocks = n_blocks,
		.n_kv_heads = n_kv_heads,
		.head_dim = head_dim,
		.type = type,
	};
	p->map_bytes = p->layout.page_bytes * (size_t)n_pages;
	p->free_ids = malloc(sizeof(int32_t) * (size_t)n_pages);
	base = mmap(NULL, p->map_bytes, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!p->free_ids || base == MAP_FAILED) {
		free(p->free_ids);
		free(p);
		return -ENOMEM;
	}
	madvise(base, p->map_bytes, MADV_HUGEPAGE);
	p->layout.base = base;
	p->n_pages = n_pages;
	p->n_free = n_pages;
	for (int i = 0; i < n_pages; i++)
		p->free_ids[i] = n_pages - 1 - i;	/* page 0 comes first */
	*out = p;
	return 0;
}

void pg_kv_pool_destroy(struct pg_kv_pool *p)
{
	if (!p)
		return;
	munmap(p->layout.base, p->map_bytes);
	free(p->free_ids);
	free(p);
}

const struct pg_kv_layout *pg_kv_pool_layout(const struct pg_kv_pool *p)
{
	return &p->layout;
}

int pg_kv_pool_n_pages(const struct pg_kv_pool *p)
{
	return p->n_pages;
}

int pg_kv_pool_n_free(const struct pg_kv_pool *p)
{
	return p->n_free;
}

int32_t pg_kv_page_alloc(struct pg_kv_pool *p)
{
	return p->n_free ? p->free_ids[--p->n_free] : -1;
}

void pg_kv_page_free(struct pg_kv_pool *p, int32_t page)
{
	p->free_ids[p->n_free++] = page;
}

int pg_seq_kv_reserve(struct pg_kv_pool *p, struct pg_seq_kv *s, int n_tokens)
{
	int need = (n_tokens + p->layout.page_tokens - 1) / p->layout.page_tokens;

	if (need > s->cap_pages) {
		int cap = s->cap_pages ? s->cap_pages : 4;
		int32_t *v;

		while (cap < need)
			cap *= 2;
		v = realloc(s->pages, sizeof(int32_t) * (size_t)cap);
		if (!v)
			return -ENOMEM;
		s->pages = v;
		s->cap_pages = cap;
	}
	while (s->n_pages < need) {
		int32_t id = pg_kv_page_alloc(p);

		if (id < 0)
			return -ENOSPC;
		s->pages[s->n_pages++] = id;
	}
	return 0;
}

void pg_seq_kv_release(struct pg_kv_pool *p, struct pg_seq_kv *s)
{
	for (int i = s->n_pages - 1; i >= 0; i--)
		pg_kv_page_free(p, s->pages[i]);
	free(s->pages);
	*s = (struct pg_seq_kv){ 0 };
}
