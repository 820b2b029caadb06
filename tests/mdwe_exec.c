/*
 * mdwe_exec.c - run a command under the kernel's memory-deny-write-execute
 * (prctl PR_SET_MDWE, Linux 6.3): no mapping may be writable and
 * executable, nor become executable, as under systemd's
 * MemoryDenyWriteExecute=yes.  For tests/test-systemd.sh; exits 77 where
 * the kernel lacks it.
 *
 * Usage: mdwe_exec COMMAND [ARGS...]
 */
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#endif
#ifndef PR_MDWE_REFUSE_EXEC_GAIN
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: mdwe_exec COMMAND [ARGS...]\n");
		return 2;
	}
	if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0L, 0L, 0L)) {
		perror("mdwe_exec: prctl(PR_SET_MDWE)");
		return 77;
	}
	execvp(argv[1], argv + 1);
	perror("mdwe_exec: exec");
	return 127;
}
