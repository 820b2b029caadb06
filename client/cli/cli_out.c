/*
 * cli_out.c - the `pagoda` command's output: JSON lines for --json, the
 * figures for --verbose, and error messages with their exit statuses.
 */
#include <stdlib.h>
#include <string.h>

#include "client/cli/cli.h"
#include "common/escape.h"

void cli_buf_add(struct cli_buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->s, cap);
		if (!p) {
			fputs("pagoda: out of memory\n", stderr);
			exit(CLI_FAIL);
		}
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
}

void cli_json_string(FILE *f, const char *s, size_t n)
{
	putc('"', f);
	pg_escape_fput(f, s, n, PG_ESCAPE_JSON);
	putc('"', f);
}

static void json_head(const char *type, const struct pagoda_event *ev)
{
	printf("{\"event\":\"%s\",\"id\":%llu,\"sample\":%u", type,
	       (unsigned long long)ev->id, ev->sample);
}

static void json_tokens(const struct pagoda_event *ev)
{
	json_head("tokens", ev);
	fputs(",\"ids\":[", stdout);
	for (size_t i = 0; i < ev->n_ids; i++)
		printf(i ? ",%d" : "%d", ev->ids[i]);
	fputs("],\"text\":", stdout);
	cli_json_string(stdout, ev->text, ev->text_len);
}

static void json_logprobs(const struct pagoda_event *ev)
{
	json_head("logprobs", ev);
	printf(",\"token\":%d,\"logprob\":%.6g,\"logprobs\":[",
	       ev->n_ids ? ev->ids[0] : -1, (double)ev->logprob);
	for (size_t i = 0; i < ev->n_logprobs; i++)
		printf("%s{\"id\":%d,\"logprob\":%.6g}", i ? "," : "",
		       ev->logprobs[i].id, (double)ev->logprobs[i].logprob);
	putchar(']');
}

/* ended_at_once - the sample's first token ended it: nothing came. */
static int ended_at_once(const struct pagoda_event *ev)
{
	return ev->finish == PAGODA_FINISH_STOP && ev->figures.n_gen == 0;
}

static void json_done(const struct pagoda_event *ev, const struct cli_buf *text)
{
	const struct pagoda_figures *f = &ev->figures;

	json_head("done", ev);
	printf(",\"last\":%s,\"finish\":\"%s\",\"text\":", ev->last ? "true" : "false",
	       pagoda_finish_name(ev->finish));
	cli_json_string(stdout, text && text->s ? text->s : "", text ? text->len : 0);
	printf(",\"n_prompt\":%u,\"n_cached\":%u,\"n_gen\":%u,\"n_preempt\":%u,"
	       "\"queue_s\":%.6f,\"ttft_s\":%.6f,\"itl_s\":%.6f,\"seed\":%llu,"
	       "\"ended_at_first_token\":%s",
	       f->n_prompt, f->n_cached, f->n_gen, f->n_preempt, f->queue_s,
	       f->ttft_s, f->itl_s, (unsigned long long)f->seed,
	       ended_at_once(ev) ? "true" : "false");
}

void cli_json_event(const struct pagoda_event *ev, const struct cli_buf *text)
{
	switch (ev->type) {
	case PAGODA_EVENT_TOKENS:
		json_tokens(ev);
		break;
	case PAGODA_EVENT_LOGPROBS:
		json_logprobs(ev);
		break;
	case PAGODA_EVENT_DONE:
		json_done(ev, text);
		break;
	case PAGODA_EVENT_ERROR:
		json_head("error", ev);
		printf(",\"code\":%d,\"error\":\"%s\",\"message\":", ev->error,
		       pagoda_strerror(ev->error));
		cli_json_string(stdout, ev->text, ev->text_len);
		break;
	}
	puts("}");
	fflush(stdout);
}

void cli_figures(const struct pagoda_event *ev, const char *hint)
{
	const struct pagoda_figures *f = &ev->figures;
	int once = ended_at_once(ev) && hint;

	fprintf(stderr,
		"pagoda: sample %u: %s; prompt %u tokens (%u cached); generated %u tokens; "
		"queued %.3f s; first token %.3f s; %.1f ms between tokens; "
		"preempted %u times; seed %llu%s%s\n",
		ev->sample, pagoda_finish_name(ev->finish), f->n_prompt, f->n_cached,
		f->n_gen, f->queue_s, f->ttft_s, f->itl_s * 1e3, f->n_preempt,
		(unsigned long long)f->seed, once ? "; " : "", once ? hint : "");
}

void cli_logprobs(const struct pagoda_event *ev, const char *text, size_t len)
{
	fprintf(stderr, "pagoda: sample %u: token %d ", ev->sample,
		ev->n_ids ? ev->ids[0] : -1);
	cli_json_string(stderr, text, len);
	fprintf(stderr, " logprob %.4f; top", (double)ev->logprob);
	for (size_t i = 0; i < ev->n_logprobs; i++)
		fprintf(stderr, "%s %d %.4f", i ? "," : "", ev->logprobs[i].id,
			(double)ev->logprobs[i].logprob);
	putc('\n', stderr);
}

int cli_error(int code, const char *msg)
{
	fprintf(stderr, "pagoda: %s\n", msg && *msg ? msg : pagoda_strerror(code));
	switch (code) {
	case PAGODA_ECONNECT:
	case PAGODA_EACCESS:
	case PAGODA_EVERSION:
	case PAGODA_ECLIENTS:
		return CLI_CONNECT;
	case PAGODA_ESHUTDOWN:
		return CLI_GONE;
	default:
		return CLI_FAIL;
	}
}
