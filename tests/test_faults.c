/*
 * test_faults.c - allocation failure injection against a live pagodad, as
 * SQLite tests its allocator (tests/test-faults.sh starts the daemon with
 * PAGODA_FAULT_INJECTION=1):
 *
 *   test_faults SOCK ADMIN-SOCK [--max N]
 *
 * A bystander client connects first and stays.  Then for N = 1, 2, ...
 * the admin command FAULT arms the daemon to fail the Nth allocation from
 * then on, and a victim runs the whole request path: connect (the
 * session's set-up), tokenize, a text prompt with log-probabilities and a
 * stop string, a streamed prompt cancelled after its first token, and a
 * chat prompt of two samples (parse, tokenize, admit, KV pages,
 * completions), detokenize, ping, close.  Each
 * call either succeeds with the answer it gives unarmed, or fails with an
 * error code and a message that says something; then the bystander must
 * still be served (a ping and a generation equal to its first one).  The
 * loop ends at the first N whose failure never fired (the victim's whole
 * path made fewer than N allocations), or at --max.  Crashes and leaks are
 * the script's to catch: it stops the daemon and reads its log.
 *
 * Exit status: 0 pass, 1 fail, 2 usage.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "include/pagoda.h"
#include "wire/admin_proto.h"

static int failures;

#define FAIL(...) do { failures++; \
	fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } while (0)

static const char *admin_path;

/* One admin command FAULT with arg n; the answer's text goes to out. */
static int admin_fault(long n, char *out, size_t out_len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct pg_admin_request *q = calloc(1, sizeof(*q));
	struct pg_admin_reply r;
	size_t got = 0;
	int fd, rc = -1;

	if (!q)
		return -1;
	q->magic = PG_ADMIN_MAGIC;
	q->version = PG_ADMIN_VERSION;
	q->cmd = PG_ADMIN_FAULT;
	q->arg = (uint64_t)n;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", admin_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    write(fd, q, sizeof(*q)) != (ssize_t)sizeof(*q) ||
	    read(fd, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
		fprintf(stderr, "test_faults: admin socket %s: %s\n", admin_path, strerror(errno));
		goto out;
	}
	while (got < r.len && got + 1 < out_len) {
		ssize_t k = read(fd, out + got, out_len - 1 - got);

		if (k <= 0)
			break;
		got += (size_t)k;
	}
	out[got] = 0;
	rc = r.status;
out:
	if (fd >= 0)
		close(fd);
	free(q);
	return rc;
}

/* What one run of the request path gave, to compare with the unarmed run. */
struct outcome {
	int connect_rc;
	int tok_rc, gen_rc, stream_rc, chat_rc, detok_rc, ping_rc;
	size_t n_ids;
	int32_t ids[64];
	char gen[256], chat[256], detok[256];
};

/* A call failed: its message must say something. */
static void check_error(const char *what, long n, int rc, const char *msg)
{
	if (rc >= 0)
		return;
	if (!msg || strlen(msg) < 8)
		FAIL("N=%ld: %s failed (%s) without a message", n, what, pagoda_strerror(rc));
	else if (rc != PAGODA_ENOMEM || !strstr(msg, "memory"))
		FAIL("N=%ld: %s failed with %s, \"%s\", where an allocation failed: "
		     "PAGODA_ENOMEM and a message that says out of memory were due",
		     n, what, pagoda_strerror(rc), msg);
	else if (n <= 3 || getenv("TEST_FAULTS_VERBOSE"))
		printf("N=%ld: %s: %s: %s\n", n, what, pagoda_strerror(rc), msg);
}

static int one_generation(pagoda_t *p, const struct pagoda_request *req, char *text,
			  size_t text_len)
{
	struct pagoda_completion c;
	int rc = pagoda_generate(p, req, &c);

	text[0] = 0;
	if (rc)
		return rc;
	if (c.n_samples == 1 && c.samples[0].finish != PAGODA_FINISH_ERROR)
		snprintf(text, text_len, "%s", c.samples[0].text);
	else
		rc = PAGODA_EENGINE;	/* a failed sample: its reason is the finish */
	pagoda_completion_free(&c);
	return rc;
}

static void run_path(const char *sock, long n, struct outcome *o)
{
	static const char text[] = "Hello, world. The quick brown fox";
	struct pagoda_message msgs[2] = {
		{ PAGODA_ROLE_SYSTEM, "Be brief." },
		{ PAGODA_ROLE_USER, "What is the capital of France?" },
	};
	struct pagoda_request req;
	pagoda_t *p = NULL;
	static const char *const stops[] = { "zzzz" };
	int32_t *ids = NULL;
	char *back = NULL;
	int cancelled = 0;
	uint64_t id = 0;

	memset(o, 0, sizeof(*o));
	o->connect_rc = pagoda_connect(sock, &p);
	if (o->connect_rc) {
		check_error("connect", n, o->connect_rc, pagoda_last_error(NULL));
		return;
	}
	o->tok_rc = pagoda_tokenize(p, text, sizeof(text) - 1, PAGODA_TOKENIZE_ADD_BOS,
				    &ids, &o->n_ids);
	check_error("tokenize", n, o->tok_rc, pagoda_last_error(p));
	if (!o->tok_rc) {
		size_t k = o->n_ids < 64 ? o->n_ids : 64;

		memcpy(o->ids, ids, k * sizeof(*ids));
	}

	pagoda_request_init(&req);
	req.prompt = "The capital of France is";
	req.temperature = 0;
	req.max_tokens = 6;
	req.ignore_eos = 1;
	req.n_logprobs = 3;
	req.stop = stops;
	req.n_stop = 1;
	o->gen_rc = one_generation(p, &req, o->gen, sizeof(o->gen));
	check_error("generate", n, o->gen_rc, pagoda_last_error(p));

	/* streamed and cancelled after its first token */
	pagoda_request_init(&req);
	req.prompt = "Once there was";
	req.temperature = 0;
	req.max_tokens = 200;
	req.ignore_eos = 1;
	o->stream_rc = pagoda_submit(p, &req, &id);
	check_error("submit", n, o->stream_rc, pagoda_last_error(p));
	while (!o->stream_rc) {
		struct pagoda_event ev;
		int k = pagoda_next_event(p, &ev, 10000);

		if (k <= 0) {
			o->stream_rc = k ? k : PAGODA_ECONNECT;
			if (k)
				check_error("stream", n, k, pagoda_last_error(p));
			else
				FAIL("N=%ld: a streamed request gave no event for 10 s", n);
			break;
		}
		if (ev.type == PAGODA_EVENT_TOKENS && !cancelled) {
			cancelled = 1;
			if (pagoda_cancel(p, id) && !ev.last)
				FAIL("N=%ld: cancel: %s", n, pagoda_last_error(p));
		}
		if (ev.type == PAGODA_EVENT_ERROR) {
			o->stream_rc = ev.error;
			check_error("stream", n, ev.error, ev.text);
		}
		if (ev.last)
			break;
	}

	pagoda_request_init(&req);
	req.messages = msgs;
	req.n_messages = 2;
	req.temperature = 0;
	req.max_tokens = 6;
	req.ignore_eos = 1;
	req.n = 2;
	{
		struct pagoda_completion c;

		o->chat_rc = pagoda_generate(p, &req, &c);
		check_error("chat", n, o->chat_rc, pagoda_last_error(p));
		if (!o->chat_rc) {
			if (c.n_samples == 2 && c.samples[0].finish != PAGODA_FINISH_ERROR)
				snprintf(o->chat, sizeof(o->chat), "%s", c.samples[0].text);
			else
				o->chat_rc = PAGODA_EENGINE;
			pagoda_completion_free(&c);
		}
	}

	if (!o->tok_rc) {
		o->detok_rc = pagoda_detokenize(p, ids, o->n_ids, &back, NULL);
		check_error("detokenize", n, o->detok_rc, pagoda_last_error(p));
		if (!o->detok_rc)
			snprintf(o->detok, sizeof(o->detok), "%s", back);
	}
	o->ping_rc = pagoda_ping(p, NULL);
	check_error("ping", n, o->ping_rc, pagoda_last_error(p));
	free(ids);
	free(back);
	pagoda_close(p);
}

/* A call that succeeded under the fault must have answered as unarmed. */
static void compare(long n, const struct outcome *base, const struct outcome *o)
{
	if (o->connect_rc)
		return;
	if (!o->tok_rc && (o->n_ids != base->n_ids ||
			   memcmp(o->ids, base->ids, sizeof(o->ids))))
		FAIL("N=%ld: tokenize gave other ids than unarmed", n);
	if (!o->gen_rc && strcmp(o->gen, base->gen))
		FAIL("N=%ld: generate gave \"%s\", unarmed \"%s\"", n, o->gen, base->gen);
	if (!o->chat_rc && strcmp(o->chat, base->chat))
		FAIL("N=%ld: chat gave \"%s\", unarmed \"%s\"", n, o->chat, base->chat);
	if (!o->detok_rc && !o->tok_rc && strcmp(o->detok, base->detok))
		FAIL("N=%ld: detokenize gave \"%s\", unarmed \"%s\"", n, o->detok, base->detok);
}

static int failed_calls(const struct outcome *o)
{
	return !!o->connect_rc + !!o->tok_rc + !!o->gen_rc + !!o->stream_rc + !!o->chat_rc +
	       !!o->detok_rc + !!o->ping_rc;
}

int main(int argc, char **argv)
{
	struct outcome base, o;
	struct pagoda_request req;
	char bystander_text[256], text[256], answer[1024];
	pagoda_t *by = NULL;
	long n, max = 100000, n_failed_runs = 0;
	int rc;

	if (argc < 3) {
		fprintf(stderr, "usage: test_faults SOCK ADMIN-SOCK [--max N]\n");
		return 2;
	}
	admin_path = argv[2];
	if (argc == 5 && !strcmp(argv[3], "--max"))
		max = atol(argv[4]);

	/* the admin command must be refused nowhere but here: a daemon
	   started without PAGODA_FAULT_INJECTION says so (test-faults.sh) */
	rc = admin_fault(0, answer, sizeof(answer));
	if (rc) {
		fprintf(stderr, "test_faults: FAULT refused (%d): %s", rc, answer);
		return 1;
	}

	rc = pagoda_connect(argv[1], &by);
	if (rc) {
		fprintf(stderr, "test_faults: bystander: %s\n", pagoda_last_error(NULL));
		return 1;
	}
	pagoda_request_init(&req);
	req.prompt = "Once upon a time";
	req.temperature = 0;
	req.max_tokens = 4;
	req.ignore_eos = 1;
	if (one_generation(by, &req, bystander_text, sizeof(bystander_text))) {
		fprintf(stderr, "test_faults: bystander: %s\n", pagoda_last_error(by));
		return 1;
	}

	run_path(argv[1], 0, &base);
	if (failed_calls(&base)) {
		fprintf(stderr, "test_faults: the request path fails unarmed\n");
		return 1;
	}

	for (n = 1; n <= max; n++) {
		long seen = 0;
		int fired;

		if (admin_fault(n, answer, sizeof(answer))) {
			FAIL("N=%ld: arming refused: %s", n, answer);
			break;
		}
		run_path(argv[1], n, &o);
		if (admin_fault(0, answer, sizeof(answer))) {
			FAIL("N=%ld: disarming refused: %s", n, answer);
			break;
		}
		fired = strstr(answer, "fired: yes") != NULL;
		if (sscanf(strstr(answer, "seen: ") ? strstr(answer, "seen: ") : "", "seen: %ld", &seen) != 1)
			FAIL("N=%ld: the FAULT answer has no count: %s", n, answer);
		compare(n, &base, &o);
		if (failed_calls(&o))
			n_failed_runs++;
		if (fired && !failed_calls(&o) && (n <= 3 || getenv("TEST_FAULTS_VERBOSE")))
			printf("N=%ld: the failure was absorbed (no call failed)\n", n);

		/* the bystander is served as before, whatever the victim met */
		rc = pagoda_ping(by, NULL);
		if (rc)
			FAIL("N=%ld: bystander ping: %s", n, pagoda_last_error(by));
		rc = one_generation(by, &req, text, sizeof(text));
		if (rc)
			FAIL("N=%ld: bystander generate: %s", n, pagoda_last_error(by));
		else if (strcmp(text, bystander_text))
			FAIL("N=%ld: bystander got \"%s\", before \"%s\"", n, text, bystander_text);
		if (rc || failures > 20)
			break;
		if (!fired) {
			printf("test_faults: every allocation of the path failed once: "
			       "%ld allocations, %ld runs with an error, %d failures\n",
			       n - 1, n_failed_runs, failures);
			break;
		}
	}
	if (n > max)
		printf("test_faults: stopped at --max %ld\n", max);
	if (n < 10)
		FAIL("the request path made only %ld allocations: is the hook wired?", n - 1);
	pagoda_close(by);
	return failures ? 1 : 0;
}
