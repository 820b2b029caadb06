/*
 * http/server.c - pagoda-http's main(): the options, the HTTP server
 * (libmicrohttpd), API keys, the limits on bodies, headers and requests in
 * flight, the pool of connections to pagodad, /metrics, and the signals.
 * The endpoints are api.c's; the threading model is http.h's.
 *
 *   pagoda-http [--socket PATH] [--listen HOST:PORT] [--api-keys FILE] ...
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/ctl/ctl.h"
#include "common/escape.h"
#include "http/http.h"
#include "wire/stats_layout.h"

struct gw gw = {
	.pool_lock = PTHREAD_MUTEX_INITIALIZER,
};

static const char usage[] =
"Usage: pagoda-http [options]\n"
"An OpenAI-compatible HTTP gateway to pagodad (pagoda-http(8)).\n"
"\n"
"Options:\n"
"  -s, --socket PATH        pagodad's socket (default $PAGODA_SOCKET, else\n"
"                           " PAGODA_DEFAULT_SOCKET ")\n"
"  -l, --listen HOST:PORT   address to serve on (default 127.0.0.1:8080;\n"
"                           [::1]:8080 for IPv6)\n"
"      --stats PATH         pagodad's statistics segment, for /metrics\n"
"                           (default NAME.stats beside the socket)\n"
"      --api-keys FILE      require \"Authorization: Bearer KEY\" on /v1/, KEY\n"
"                           one of FILE's lines (# comments); FILE must be\n"
"                           readable by its owner only\n"
"      --max-body BYTES     largest request body (default 1048576): 413\n"
"      --max-header BYTES   largest request headers, all together (default\n"
"                           16384): 431\n"
"      --max-inflight N     generation requests at once (default 64): 429\n"
"      --max-connections N  HTTP connections at once (default 256)\n"
"      --timeout SECONDS    close a connection idle this long (default 60)\n"
"  -h, --help               this text\n"
"  -V, --version            the version\n";

static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("pagoda-http: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/* ---- the pool of connections ---- */

int gw_take(pagoda_t **out, const char **msg)
{
	int rc;

	pthread_mutex_lock(&gw.pool_lock);
	if (gw.n_idle) {
		*out = gw.idle[--gw.n_idle];
		pthread_mutex_unlock(&gw.pool_lock);
		return 0;
	}
	pthread_mutex_unlock(&gw.pool_lock);
	rc = pagoda_connect(gw.socket, out);
	if (rc < 0)
		*msg = pagoda_last_error(NULL);
	return rc;
}

void gw_give(pagoda_t *p, int ok)
{
	if (!p)
		return;
	if (ok) {
		pthread_mutex_lock(&gw.pool_lock);
		if (gw.n_idle < sizeof gw.idle / sizeof gw.idle[0]) {
			gw.idle[gw.n_idle++] = p;
			p = NULL;
		}
		pthread_mutex_unlock(&gw.pool_lock);
	}
	pagoda_close(p);
}

/* ---- answers ---- */

void gw_count(unsigned status)
{
	__atomic_add_fetch(&gw.requests, 1, __ATOMIC_RELAXED);
	if (status / 100 < 6)
		__atomic_add_fetch(&gw.by_status[status / 100], 1, __ATOMIC_RELAXED);
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status,
				 const char *type, char *text, size_t len,
				 const char *hdr, const char *hdr_value)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (hdr)
		MHD_add_response_header(r, hdr, hdr_value);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	gw_count(status);
	return ret;
}

static enum MHD_Result send_json_hdr(struct MHD_Connection *c, unsigned status,
				     json_t *body, const char *hdr,
				     const char *hdr_value)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	size_t len;

	json_decref(body);
	if (!text)
		return MHD_NO;
	len = strlen(text);
	/* a newline at the end, as curl users like it */
	char *t = realloc(text, len + 2);
	if (!t) {
		free(text);
		return MHD_NO;
	}
	t[len++] = '\n';
	t[len] = 0;
	return send_text(c, status, "application/json", t, len, hdr, hdr_value);
}

enum MHD_Result gw_send_json(struct MHD_Connection *c, unsigned status,
			     json_t *body)
{
	return send_json_hdr(c, status, body, NULL, NULL);
}

static json_t *error_object(unsigned status, const char *message,
			    const char *param, const char *code)
{
	const char *type = status == 401 ? "authentication_error" :
			   status == 429 ? "rate_limit_error" :
			   status < 500 ? "invalid_request_error" : "server_error";

	return json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error",
			 "message", message, "type", type,
			 "param", param, "code", code);
}

enum MHD_Result gw_send_error(struct MHD_Connection *c, unsigned status,
			      const char *message, const char *param,
			      const char *code)
{
	json_t *body = error_object(status, message, param, code);
	const char *hdr = NULL, *value = NULL;

	if (status == 401) {
		hdr = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
		value = "Bearer";
	}
	return send_json_hdr(c, status, body, hdr, value);
}

/* ---- API keys ---- */

/*
 * load_keys - read FILE's keys, one a line (blank lines and # comments
 * skipped, spaces around a key dropped); refuse a file that its group or
 * others may read or write, or that holds no key.
 */
static void load_keys(const char *path)
{
	struct stat st;
	char line[1024];
	FILE *f = fopen(path, "r");

	if (!f)
		die("--api-keys %s: %s", path, strerror(errno));
	if (fstat(fileno(f), &st) < 0)
		die("--api-keys %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		die("--api-keys %s: not a regular file", path);
	if (st.st_mode & 077)
		die("--api-keys %s: the file is open to its group or others (mode %04o): "
		    "it must be readable by its owner only (chmod 600 %s)",
		    path, (unsigned)(st.st_mode & 07777), path);
	while (fgets(line, sizeof line, f)) {
		char *s = line, *e;

		if (!strchr(line, '\n') && !feof(f))
			die("--api-keys %s: a line over %zu bytes", path, sizeof line - 2);
		while (*s == ' ' || *s == '\t')
			s++;
		e = s + strlen(s);
		while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
			*--e = 0;
		if (!*s || *s == '#')
			continue;
		char **k = realloc(gw.keys, (gw.n_keys + 1) * sizeof *k);
		if (!k || !(k[gw.n_keys] = strdup(s)))
			die("out of memory");
		gw.keys = k;
		gw.n_keys++;
	}
	fclose(f);
	if (!gw.n_keys)
		die("--api-keys %s: no key in the file (one a line)", path);
}

/* same - compare in a time that depends on the lengths only */
static int same(const char *a, size_t na, const char *b, size_t nb)
{
	unsigned char d = na != nb;

	for (size_t i = 0; i < na && i < nb; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

static int authorized(struct MHD_Connection *c)
{
	const char *h;
	int ok = 0;

	if (!gw.n_keys)
		return 1;
	h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!h || strncasecmp(h, "Bearer ", 7))
		return 0;
	h += 7;
	while (*h == ' ')
		h++;
	for (size_t i = 0; i < gw.n_keys; i++)
		ok |= same(h, strlen(h), gw.keys[i], strlen(gw.keys[i]));
	return ok;
}

/* ---- /metrics ---- */

static enum MHD_Result metrics(struct MHD_Connection *c)
{
	static const char *cls[6] = { "", "1xx", "2xx", "3xx", "4xx", "5xx" };
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct ctl_seg seg;
	struct ctl_snap snap = { 0 };
	char err[512];
	int rc;

	if (!f)
		return MHD_NO;
	/* pagodad's figures, as pagodactl metrics gives them */
	rc = ctl_seg_open(gw.stats_path, &seg, err, sizeof err);
	if (!rc) {
		rc = ctl_seg_read(&seg, &snap, err, sizeof err);
		ctl_seg_close(&seg);
	}
	if (!rc) {
		ctl_metrics_write(f, &snap);
		ctl_snap_free(&snap);
	} else {
		fputs("# pagodad's figures are missing: ", f);
		ctl_put_escaped(f, err, sizeof err, PG_ESCAPE_TEXT);
		fprintf(f, " (pagoda-http --stats names the file)\n"
			   "# HELP pagoda_up 1 while pagodad serves.\n"
			   "# TYPE pagoda_up gauge\npagoda_up 0\n");
	}
	/* the gateway's own */
	fprintf(f, "# HELP pagoda_http_requests_total HTTP requests answered.\n"
		   "# TYPE pagoda_http_requests_total counter\n"
		   "pagoda_http_requests_total %llu\n",
		(unsigned long long)__atomic_load_n(&gw.requests, __ATOMIC_RELAXED));
	fprintf(f, "# HELP pagoda_http_responses_total HTTP answers by status class.\n"
		   "# TYPE pagoda_http_responses_total counter\n");
	for (int i = 1; i < 6; i++)
		fprintf(f, "pagoda_http_responses_total{status=\"%s\"} %llu\n", cls[i],
			(unsigned long long)__atomic_load_n(&gw.by_status[i], __ATOMIC_RELAXED));
	fprintf(f, "# HELP pagoda_http_in_flight Generation requests running now.\n"
		   "# TYPE pagoda_http_in_flight gauge\n"
		   "pagoda_http_in_flight %u\n",
		__atomic_load_n(&gw.in_flight, __ATOMIC_RELAXED));
	fprintf(f, "# HELP pagoda_http_prompt_tokens_total Prompt tokens of finished requests.\n"
		   "# TYPE pagoda_http_prompt_tokens_total counter\n"
		   "pagoda_http_prompt_tokens_total %llu\n",
		(unsigned long long)__atomic_load_n(&gw.prompt_tokens, __ATOMIC_RELAXED));
	fprintf(f, "# HELP pagoda_http_completion_tokens_total Tokens generated.\n"
		   "# TYPE pagoda_http_completion_tokens_total counter\n"
		   "pagoda_http_completion_tokens_total %llu\n",
		(unsigned long long)__atomic_load_n(&gw.completion_tokens, __ATOMIC_RELAXED));
	fprintf(f, "# HELP pagoda_http_disconnects_total Requests cancelled because the client went away.\n"
		   "# TYPE pagoda_http_disconnects_total counter\n"
		   "pagoda_http_disconnects_total %llu\n",
		(unsigned long long)__atomic_load_n(&gw.disconnects, __ATOMIC_RELAXED));
	if (fclose(f) != 0) {
		free(text);
		return MHD_NO;
	}
	return send_text(c, 200, "text/plain; version=0.0.4", text, len, NULL, NULL);
}

/* ---- the request handler ---- */

/* One HTTP request: its body, gathered as it comes. */
struct req {
	struct buf body;
	size_t discarded;	/* bytes past max_body, read and dropped */
	int too_big;
	int headers_too_big;
};

static enum MHD_Result add_header_size(void *cls, enum MHD_ValueKind kind,
				       const char *key, const char *value)
{
	size_t *n = cls;

	*n += strlen(key) + (value ? strlen(value) : 0) + 4;
	return MHD_YES;
}

static int path_is(const char *url, const char *path)
{
	size_t n = strlen(path);

	return !strncmp(url, path, n) && (!url[n] || (url[n] == '/' && !url[n + 1]));
}

static enum MHD_Result not_allowed(struct MHD_Connection *c, const char *allow)
{
	char msg[128];
	json_t *body;

	snprintf(msg, sizeof msg, "method not allowed here: use %s", allow);
	body = error_object(405, msg, NULL, "method_not_allowed");
	return send_json_hdr(c, 405, body, MHD_HTTP_HEADER_ALLOW, allow);
}

static enum MHD_Result generation(struct MHD_Connection *c, struct req *r,
				  int chat)
{
	enum MHD_Result ret;

	if (__atomic_add_fetch(&gw.in_flight, 1, __ATOMIC_ACQ_REL) > gw.max_inflight) {
		__atomic_sub_fetch(&gw.in_flight, 1, __ATOMIC_ACQ_REL);
		return gw_send_error(c, 429, "too many requests in flight "
				     "(pagoda-http --max-inflight): try again later",
				     NULL, "rate_limit_exceeded");
	}
	/* the endpoint hands in_flight back (a stream when it ends) */
	ret = chat ? api_chat(c, r->body.s ? r->body.s : "", r->body.len)
		   : api_completions(c, r->body.s ? r->body.s : "", r->body.len);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
			      const char *url, const char *method,
			      const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	struct req *r = *con_cls;

	if (!r) {
		size_t hsize = 0;
		const char *cl;

		r = calloc(1, sizeof *r);
		if (!r)
			return MHD_NO;
		*con_cls = r;
		MHD_get_connection_values(c, MHD_HEADER_KIND, add_header_size, &hsize);
		r->headers_too_big = hsize > gw.max_header;
		cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						 MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > gw.max_body)
			r->too_big = 1;
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;

		*upload_size = 0;
		if (r->too_big || r->body.len + n > gw.max_body) {
			r->too_big = 1;
			r->discarded += n;
			/* read and drop a body up to 64 times the limit, so
			   that the client sees the 413; beyond, hang up */
			return r->discarded / 64 > gw.max_body ? MHD_NO : MHD_YES;
		}
		if (buf_add(&r->body, upload, n) < 0)
			return MHD_NO;
		return MHD_YES;
	}

	if (r->headers_too_big) {
		char msg[160];

		snprintf(msg, sizeof msg, "the request's headers are over %zu bytes "
			 "(pagoda-http --max-header)", gw.max_header);
		return gw_send_error(c, 431, msg, NULL, "headers_too_large");
	}
	if (r->too_big) {
		char msg[160];

		snprintf(msg, sizeof msg, "the request body is over %zu bytes "
			 "(pagoda-http --max-body)", gw.max_body);
		return gw_send_error(c, 413, msg, NULL, "request_too_large");
	}

	int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	int post = !strcmp(method, "POST");

	if (path_is(url, "/health"))
		return get ? api_health(c) : not_allowed(c, "GET");
	if (path_is(url, "/metrics"))
		return get ? metrics(c) : not_allowed(c, "GET");
	if (strncmp(url, "/v1/", 4)) {
		char msg[300];

		snprintf(msg, sizeof msg, "no such path: %.100s (pagoda-http serves /v1/chat/"
			 "completions, /v1/completions, /v1/models, /health, /metrics)", url);
		return gw_send_error(c, 404, msg, NULL, "not_found");
	}
	if (!authorized(c))
		return gw_send_error(c, 401, gw.n_keys && MHD_lookup_connection_value(
					     c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION) ?
				     "invalid API key" :
				     "missing API key: send the header \"Authorization: Bearer KEY\"",
				     NULL, "invalid_api_key");
	if (path_is(url, "/v1/chat/completions"))
		return post ? generation(c, r, 1) : not_allowed(c, "POST");
	if (path_is(url, "/v1/completions"))
		return post ? generation(c, r, 0) : not_allowed(c, "POST");
	if (path_is(url, "/v1/models"))
		return get ? api_models(c, NULL) : not_allowed(c, "GET");
	if (!strncmp(url, "/v1/models/", 11) && url[11])
		return get ? api_models(c, url + 11) : not_allowed(c, "GET");
	{
		char msg[160];

		snprintf(msg, sizeof msg, "no such path: %.100s", url);
		return gw_send_error(c, 404, msg, NULL, "not_found");
	}
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct req *r = *con_cls;

	if (r) {
		free(r->body.s);
		free(r);
		*con_cls = NULL;
	}
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	fputs("pagoda-http: ", stderr);
	vfprintf(stderr, fmt, ap);
}

/* ---- main ---- */

static unsigned long long parse_num(const char *opt, const char *s,
				    unsigned long long lo, unsigned long long hi)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < lo || v > hi)
		die("%s: '%s' is not a number from %llu to %llu", opt, s, lo, hi);
	return v;
}

/* parse_listen - HOST:PORT or [HOST6]:PORT into *ss; 1 if IPv6. */
static int parse_listen(const char *arg, struct sockaddr_storage *ss)
{
	char host[128];
	const char *colon, *port;
	size_t n;

	memset(ss, 0, sizeof *ss);
	if (arg[0] == '[') {
		const char *close = strchr(arg, ']');

		if (!close || close[1] != ':')
			die("--listen %s: write an IPv6 address as [ADDRESS]:PORT", arg);
		n = (size_t)(close - arg - 1);
		port = close + 2;
	} else {
		colon = strrchr(arg, ':');
		if (!colon)
			die("--listen %s: give HOST:PORT, e.g. 127.0.0.1:8080", arg);
		n = (size_t)(colon - arg);
		port = colon + 1;
	}
	if (n >= sizeof host)
		die("--listen %s: the host is too long", arg);
	memcpy(host, arg[0] == '[' ? arg + 1 : arg, n);
	host[n] = 0;
	unsigned p = (unsigned)parse_num("--listen (the port)", port, 1, 65535);
	if (arg[0] == '[') {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)p);
		if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1)
			die("--listen %s: '%s' is not an IPv6 address", arg, host);
		return 1;
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

	s4->sin_family = AF_INET;
	s4->sin_port = htons((uint16_t)p);
	if (!strcmp(host, "localhost"))
		strcpy(host, "127.0.0.1");
	if (!n || !strcmp(host, "*"))
		strcpy(host, "0.0.0.0");
	if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
		die("--listen %s: '%s' is not an IPv4 address (names other than "
		    "localhost are not resolved)", arg, host);
	return 0;
}

int main(int argc, char **argv)
{
	enum { O_STATS = 255, O_KEYS = 256, O_BODY, O_HEADER, O_INFLIGHT, O_CONNS, O_TIMEOUT };
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "listen", required_argument, NULL, 'l' },
		{ "stats", required_argument, NULL, O_STATS },
		{ "api-keys", required_argument, NULL, O_KEYS },
		{ "max-body", required_argument, NULL, O_BODY },
		{ "max-header", required_argument, NULL, O_HEADER },
		{ "max-inflight", required_argument, NULL, O_INFLIGHT },
		{ "max-connections", required_argument, NULL, O_CONNS },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	static char stats_buf[PATH_MAX];
	const char *listen = "127.0.0.1:8080", *keys = NULL;
	unsigned conns = 256, timeout = 60;
	struct sockaddr_storage ss;
	struct MHD_Daemon *d;
	sigset_t set;
	int o, v6, sig;
	pagoda_t *p;

	gw.max_body = 1 << 20;
	gw.max_header = 16384;
	gw.max_inflight = 64;
	while ((o = getopt_long(argc, argv, "s:l:hV", opts, NULL)) != -1) {
		switch (o) {
		case 's': gw.socket = optarg; break;
		case 'l': listen = optarg; break;
		case O_STATS: gw.stats_path = optarg; break;
		case O_KEYS: keys = optarg; break;
		case O_BODY: gw.max_body = parse_num("--max-body", optarg, 64, 1u << 30); break;
		case O_HEADER: gw.max_header = parse_num("--max-header", optarg, 256, 1u << 20); break;
		case O_INFLIGHT: gw.max_inflight = (unsigned)parse_num("--max-inflight", optarg, 1, 65536); break;
		case O_CONNS: conns = (unsigned)parse_num("--max-connections", optarg, 1, 65536); break;
		case O_TIMEOUT: timeout = (unsigned)parse_num("--timeout", optarg, 0, 86400); break;
		case 'h': fputs(usage, stdout); return 0;
		case 'V': printf("pagoda-http %s\n", PACKAGE_VERSION); return 0;
		default:
			fputs("pagoda-http: see pagoda-http --help\n", stderr);
			return 2;
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (see --help)", argv[optind]);
	v6 = parse_listen(listen, &ss);
	if (!gw.stats_path) {
		const char *sock = gw.socket;

		if (!sock || !*sock)
			sock = getenv("PAGODA_SOCKET");
		if (!sock || !*sock)
			sock = PAGODA_DEFAULT_SOCKET;
		if (pg_stats_path_beside(sock, ".stats", stats_buf, sizeof stats_buf))
			die("--socket %s: the path is too long", sock);
		gw.stats_path = stats_buf;
	}
	if (keys)
		load_keys(keys);
	gw.created = (long)time(NULL);

	/* the signals go to sigwait() below, in no other thread */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	/* headers are checked against --max-header in handle(); MHD's own
	   limit (its buffer for a connection) is left above that */
	size_t mem = gw.max_header * 2 + 65536;
	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
			     MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0),
			     0, NULL, NULL, handle, NULL,
			     MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
			     MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
			     MHD_OPTION_CONNECTION_LIMIT, conns,
			     MHD_OPTION_CONNECTION_TIMEOUT, timeout,
			     MHD_OPTION_CONNECTION_MEMORY_LIMIT, mem,
			     MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
			     MHD_OPTION_END);
	if (!d)
		die("cannot listen on %s: %s (another program on the port? choose "
		    "another with --listen)", listen, strerror(errno));

	if (pagoda_connect(gw.socket, &p) == 0) {
		struct pagoda_model_info mi;

		if (pagoda_model_info(p, &mi) == 0)
			fprintf(stderr, "pagoda-http: pagodad serves %s\n", mi.model);
		gw_give(p, 1);
	} else {
		fprintf(stderr, "pagoda-http: warning: %s (requests get 503 until pagodad "
			"answers)\n", pagoda_last_error(NULL));
	}
	fprintf(stderr, "pagoda-http: listening on %s%s\n", listen,
		gw.n_keys ? " (API keys required)" : "");

	while (sigwait(&set, &sig) != 0 || (sig != SIGINT && sig != SIGTERM))
		;
	fprintf(stderr, "pagoda-http: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
	__atomic_store_n(&gw.stopping, 1, __ATOMIC_RELEASE);
	MHD_stop_daemon(d);
	while (gw.n_idle)
		pagoda_close(gw.idle[--gw.n_idle]);
	for (size_t i = 0; i < gw.n_keys; i++)
		free(gw.keys[i]);
	free(gw.keys);
	return 0;
}
