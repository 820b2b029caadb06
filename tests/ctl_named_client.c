/*
 * ctl_named_client.c - a pagodad client with a hostile name, for
 * tests/test-ctl.sh: it names itself NAME with prctl(PR_SET_NAME) (what
 * /proc/PID/comm, and so the daemon's client table, then shows),
 * connects to SOCKET, says "connected" on standard output and stays
 * connected until its standard input closes.
 *
 *     ctl_named_client SOCKET NAME
 *
 * NAME is given with C escapes (\xNN, \\), so that a shell test can pass
 * any bytes.  Exit status: 0, 1 when the connection fails, 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "include/pagoda.h"

/* NAME's C escapes undone into out (at most 15 bytes: comm's room). */
static int unescape(const char *s, char *out, size_t len)
{
	size_t n = 0;

	while (*s && n + 1 < len) {
		if (s[0] == '\\' && s[1] == 'x' && s[2] && s[3]) {
			char hex[3] = { s[2], s[3], 0 };

			out[n++] = (char)strtoul(hex, NULL, 16);
			s += 4;
		} else if (s[0] == '\\' && s[1] == '\\') {
			out[n++] = '\\';
			s += 2;
		} else {
			out[n++] = *s++;
		}
	}
	out[n] = '\0';
	return *s ? -1 : 0;
}

int main(int argc, char **argv)
{
	char name[16], buf[64];
	pagoda_t *p;

	if (argc != 3 || unescape(argv[2], name, sizeof(name))) {
		fprintf(stderr, "usage: ctl_named_client SOCKET NAME (NAME: at most 15 bytes, \\xNN escapes)\n");
		return 2;
	}
	if (prctl(PR_SET_NAME, name, 0, 0, 0)) {
		perror("ctl_named_client: prctl(PR_SET_NAME)");
		return 1;
	}
	if (pagoda_connect(argv[1], &p)) {
		fprintf(stderr, "ctl_named_client: cannot connect to %s: %s\n", argv[1],
			pagoda_last_error(NULL));
		return 1;
	}
	printf("connected\n");
	fflush(stdout);
	while (read(STDIN_FILENO, buf, sizeof(buf)) > 0)
		;
	pagoda_close(p);
	return 0;
}
