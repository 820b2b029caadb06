/* gguf.c - being written */
#include "gguf.h"
