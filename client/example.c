/*
 * example.c - the smallest libpagoda program: connect to pagodad, stream
 * the completion of a prompt to standard output, print its figures.
 *
 *     cc example.c $(pkg-config --cflags --libs pagoda) -o example
 *     ./example "Once upon a time"
 *
 * It is libpagoda(3)'s EXAMPLE; make check builds it against the
 * uninstalled header and library to prove that it compiles.
 */
#include <stdio.h>

#include <pagoda.h>

int main(int argc, char **argv)
{
	struct pagoda_request req;
	struct pagoda_event ev;
	pagoda_t *p;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s PROMPT\n", argv[0]);
		return 2;
	}
	rc = pagoda_connect(NULL, &p);	/* $PAGODA_SOCKET or the default */
	if (rc) {
		fprintf(stderr, "%s\n", pagoda_last_error(NULL));
		return 1;
	}
	pagoda_request_init(&req);
	req.prompt = argv[1];
	req.max_tokens = 64;
	req.temperature = 0.7f;
	rc = pagoda_submit(p, &req, NULL);
	while (rc == 0) {
		rc = pagoda_next_event(p, &ev, -1);	/* 1: an event */
		if (rc < 0)
			break;
		if (rc == 1 && ev.type == PAGODA_EVENT_TOKENS) {
			fwrite(ev.text, 1, ev.text_len, stdout);
			fflush(stdout);
		} else if (rc == 1 && ev.type == PAGODA_EVENT_ERROR) {
			fprintf(stderr, "\n%s\n", ev.text);	/* the daemon's */
			pagoda_close(p);
			return 1;
		} else if (rc == 1 && ev.type == PAGODA_EVENT_DONE && ev.last) {
			break;
		}
		rc = 0;
	}
	if (rc < 0) {
		fprintf(stderr, "\n%s\n", pagoda_last_error(p));
		pagoda_close(p);
		return 1;
	}
	printf("\n[%s: %u tokens, first after %.3f s]\n",
	       pagoda_finish_name(ev.finish), ev.figures.n_gen, ev.figures.ttft_s);
	pagoda_close(p);
	return 0;
}
