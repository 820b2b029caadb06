/*
 * settings.h - every setting of pagodad in one table: each key of
 * pagodad.conf, each command-line option and each environment variable
 * that pagodad reads itself, with its type, range, default and help text.
 *
 * From the table come the getopt_long options and pagodad --help
 * (pagodad.c), the file's keys and their checks (config.c), and every
 * default: the first pgd_settings_keys() rows are the file's keys, their values in
 * struct pgd_conf (config.h); the others are the command line's own
 * settings and the environment's, their values in struct pgd_cmdline.
 *
 * Not here: the environment that the engine and the kernels read on their
 * own (PAGODA_MODEL and PAGODA_MODEL_DIR, the model's search path in
 * engine/model.c; PAGODA_CPU_KERNELS and PAGODA_CUDA_GRAPHS, in kernels/)
 * and systemd's (NOTIFY_SOCKET, WATCHDOG_*, JOURNAL_STREAM): pagodad(8)
 * documents them.
 */
#ifndef PAGODA_DAEMON_SETTINGS_H
#define PAGODA_DAEMON_SETTINGS_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

#include "daemon/engine/generate.h"

/* The kinds of value, and how each reads (and writes) as text. */
enum pgd_type {
	/* the file's keys (values in struct pgd_conf) */
	PGD_T_STR,	/* char *, owned; no control characters */
	PGD_T_MODEL,	/* PGD_T_STR whose unset value is the default model */
	PGD_T_INT,	/* int in lo..hi */
	PGD_T_SIZE,	/* size_t bytes, K/M/G/T suffixes, lo..hi */
	PGD_T_SIZE32,	/* uint32_t bytes, the same */
	PGD_T_SLOTS,	/* uint32_t, a power of two in lo..hi */
	PGD_T_FRACTION,	/* double in (0, 1] */
	PGD_T_SECONDS,	/* double > 0 */
	PGD_T_BOOL,	/* int 0 or 1: yes/no, true/false, on/off, 1/0 */
	PGD_T_MODE,	/* unsigned, octal, at most 0777 */
	PGD_T_KV_TYPE,	/* enum pg_dtype: f16, bf16, f32 */
	PGD_T_LOG_LEVEL,/* int, enum pgd_log_level: error, warn, info, debug */
	PGD_T_PARALLEL,	/* int: auto 1, manual 0 */
	PGD_T_NUMERICS,	/* int, enum pg_numerics: pagoda, llama.cpp */
	PGD_T_CHAT_FORMAT,/* int, enum pg_chat_format by its name; auto -1 */
	/* the command line's own (values in struct pgd_cmdline) */
	PGD_T_ARG,	/* const char *: the argument itself, not copied */
	PGD_T_FLAG,	/* int set to 1; the option takes no argument */
	PGD_T_FLOAT,	/* float, any finite number */
	PGD_T_SEED,	/* uint64_t, a non-negative integer (0x for hex) */
	PGD_T_STOP,	/* struct pgd_strings: repeatable, at most hi */
	PGD_T_HELP,	/* --help: no value */
	PGD_T_VERSION,	/* --version: no value */
};

#define PGD_F_RELOAD 1u	/* SIGHUP changes it in a running daemon */
#define PGD_F_UNSET 2u	/* may be left unset, which means "choose" (unset) */
#define PGD_F_POOL 4u	/* one of the KV pool's three sizes */
#define PGD_F_SHARED 8u	/* a key whose option is also a one-shot setting's
			   (the row after the keys with the same option):
			   getopt reads that one, and serving gives its
			   value to the key */

/* The sections of pagodad --help, in their order. */
enum pgd_help_group {
	PGD_H_CONFIG, PGD_H_MODEL, PGD_H_GEN, PGD_H_TOKENIZE, PGD_H_SERVE,
	PGD_H_OTHER, PGD_H_ENV, PGD_H_COUNT,
};

/* One setting: a row of the table. */
struct pgd_setting {
	const char *section;	/* pagodad.conf's [section]; NULL: no key */
	const char *key;	/* its key there */
	const char *option;	/* long option, without "--"; NULL: none */
	const char *alias;	/* another long option for it, or NULL */
	char short_opt;		/* 'm' for -m, or 0 */
	const char *env;	/* environment variable, or NULL */
	enum pgd_type type;
	long long lo, hi;	/* range (PGD_T_STOP: hi strings at most) */
	const char *def;	/* default, read as a value is; NULL: unset
				   (PGD_F_UNSET) or none (a flag, a mode) */
	const char *unset;	/* PGD_F_UNSET: what happens then */
	unsigned flags;		/* PGD_F_* */
	size_t off;		/* of its value: in struct pgd_conf for a
				   key, else in struct pgd_cmdline */
	enum pgd_help_group group;
	const char *arg;	/* the value's name in --help ("N", "SIZE") */
	const char *help;	/* what it does, without its default */
};

/* The most rows the table may grow to (arrays indexed by row). */
#define PGD_SETTINGS_MAX 128

/* The table: pgd_n_settings rows. */
extern const struct pgd_setting pgd_settings[];
extern const int pgd_n_settings;

/*
 * pgd_settings_keys - the number of keys: the rows before the first
 * without one (no row after it has a key; tests/test_settings.c checks).
 */
int pgd_settings_keys(void);

/* The most --stop strings. */
#define PGD_MAX_STOP 16

/* A repeatable option's values (PGD_T_STOP), in the order given. */
struct pgd_strings {
	const char *v[PGD_MAX_STOP];
	int n;
};

/*
 * The values of the rows that are not keys: the modes and the generation
 * of the one-shot runs, and the environment pagodad reads itself.
 */
struct pgd_cmdline {
	const char *config;		/* --config; NULL: PGD_DEFAULT_CONFIG */
	int check_config, print_config, plan;
	const char *prompt, *prompt_file;
	const char *grammar_file, *schema_file;	/* --grammar, --json-schema */
	int chat;
	struct pg_gen_params gen;	/* stop is stop.v, once parsed */
	struct pgd_strings stop;
	const char *tokenize, *tokenize_file;
	int parse_special;
	int foreground, quiet;
	int nccl_timeout_s;		/* PAGODA_NCCL_TIMEOUT */
	int fault_injection;		/* PAGODA_FAULT_INJECTION */
};

/*
 * pgd_setting_parse - text as s's value into value (s->off into its
 * struct).  Returns 0, -1 when text is not a value of s (the value is then
 * unchanged; pgd_setting_expected says what it must be), or -ENOMEM.
 */
int pgd_setting_parse(const struct pgd_setting *s, const char *text,
		      void *value);

/* pgd_setting_expected - "expected ..." for an error about s's value. */
void pgd_setting_expected(const struct pgd_setting *s, char *buf,
			  size_t len);

/*
 * pgd_setting_format - s's value as pagodad.conf writes it (a key's;
 * it reads back through pgd_setting_parse).  An unset value is "".
 */
void pgd_setting_format(const struct pgd_setting *s, const void *value,
			char *buf, size_t len);

/*
 * pgd_setting_default - s's default into value: s->def read as a value,
 * else the unset value (NULL, 0, or lo - 1 for an integer), else zero.
 * Strings are copies; the old value is not freed.  0, or -ENOMEM.
 */
int pgd_setting_default(const struct pgd_setting *s, void *value);

/* pgd_setting_is_unset - value is s's unset value (PGD_F_UNSET only). */
int pgd_setting_is_unset(const struct pgd_setting *s, const void *value);

/* pgd_setting_bytes - the size of s's value in its struct. */
size_t pgd_setting_bytes(const struct pgd_setting *s);

/* pgd_setting_takes_arg - whether s's option takes an argument. */
int pgd_setting_takes_arg(const struct pgd_setting *s);

/* The val of getopt_long for rows without a short option: this + row. */
#define PGD_OPT_BASE 256

/*
 * pgd_settings_getopt - getopt_long's options of the table into opts
 * (room for PGD_SETTINGS_MAX + 1: aliases included, a zero row last) and
 * its short options into shortopts (room for 64).  Each val is the short
 * option, else PGD_OPT_BASE + the row; pgd_setting_of_opt maps it back.
 */
void pgd_settings_getopt(struct option *opts, char *shortopts);

/* pgd_setting_of_opt - the row of a getopt_long val, or NULL. */
const struct pgd_setting *pgd_setting_of_opt(int val);

/*
 * pgd_setting_by_option - the row of a long option (without "--"; an
 * alias names its row), the key of a PGD_F_SHARED pair; NULL if none.
 */
const struct pgd_setting *pgd_setting_by_option(const char *option);

/* pgd_setting_index - s's row number. */
int pgd_setting_index(const struct pgd_setting *s);

/*
 * pgd_settings_help - the options and the environment, section by
 * section: each with its argument, its help text and its default.
 */
void pgd_settings_help(FILE *out);

/* pgd_format_bytes - bytes with the largest exact K, M, G or T suffix. */
void pgd_format_bytes(unsigned long long v, char *buf, size_t len);

/* pgd_parse_ll - a whole long long in base; 0, or -1. */
int pgd_parse_ll(const char *s, int base, long long *v);

#endif
