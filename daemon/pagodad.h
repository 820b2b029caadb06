/*
 * pagodad.h - the daemon's entry point (pagodad.c), kept out of main.c so
 * that tests link the real code.
 */
#ifndef PAGODA_PAGODAD_H
#define PAGODA_PAGODAD_H

/*
 * pagodad_main - run pagodad with its command line; returns the process
 * exit status (0 success, 1 failure, 2 usage error).
 */
int pagodad_main(int argc, char **argv);

#endif
