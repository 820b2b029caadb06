/*
 * notify.h - telling the service manager how pagodad is doing: the
 * sd_notify(3) protocol (READY=1, STATUS=..., WATCHDOG=1, STOPPING=1,
 * RELOADING=1) spoken directly over $NOTIFY_SOCKET, so that pagodad needs
 * no libsystemd.  Without $NOTIFY_SOCKET every call here does nothing.
 *
 * The state is the process's (the environment is): call these from the
 * daemon's main thread only.  A notification that cannot be sent is
 * logged once at debug level and otherwise ignored: the service manager
 * going away must not stop the daemon.
 */
#ifndef PAGODA_DAEMON_NOTIFY_H
#define PAGODA_DAEMON_NOTIFY_H

#include <stdint.h>

/*
 * pgd_notify - send one notification: newline-separated VAR=VALUE lines
 * formatted like printf.  Returns 1 when sent, 0 when there is no
 * $NOTIFY_SOCKET, -errno when sending failed.
 */
int pgd_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * pgd_notify_status - "STATUS=<text>", what `systemctl status` shows
 * (the load progress, then what the daemon serves).
 */
void pgd_notify_status(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/*
 * pgd_notify_serving - STATUS="serving N clients", sent only when n differs
 * from the last count sent (cheap to call every loop iteration).
 */
void pgd_notify_serving(int n_clients);

/*
 * pgd_notify_watchdog_ns - the interval at which the loop should send
 * WATCHDOG=1: half of $WATCHDOG_USEC, when $WATCHDOG_PID is unset or names
 * this process; 0 when the service manager watches nothing.
 */
uint64_t pgd_notify_watchdog_ns(void);

/*
 * pgd_notify_reloading - "RELOADING=1" with the CLOCK_MONOTONIC time
 * (MONOTONIC_USEC, which Type=notify-reload requires); send READY=1 when
 * the reload is done.
 */
void pgd_notify_reloading(void);

#endif
