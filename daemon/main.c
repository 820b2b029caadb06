/* main.c - pagodad: everything lives in libpagodad (see pagodad.h). */
#include "daemon/pagodad.h"

int main(int argc, char **argv)
{
	return pagodad_main(argc, argv);
}
