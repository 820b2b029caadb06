/* main.c - pagodad: everything lives in libpagodad; its command line is
   pagodad_main (pagodad.h, pagodad.c), the modes oneshot.c and server.c. */
#include "daemon/pagodad.h"

int main(int argc, char **argv)
{
	return pagodad_main(argc, argv);
}
