/*
 * test_chat.c - chat template detection and the exact prompts rendered for
 * ChatML (SmolLM2), Llama 3 and Llama 2.  The expected strings are what
 * the models' own Jinja templates give for the same messages (checked with
 * jinja2), with BOS left to the tokenizer.
 *
 * Exits 0 (pass) or 1 (fail).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/chat.h"
#include "tests/check.h"

#define SMOL_SYSTEM "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

/* tokenizer.chat_template of SmolLM2-135M-Instruct. */
static const char smol_template[] =
	"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
	"{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
	"{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
	"{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static const char llama3_template[] =
	"{% set loop_messages = messages %}{% for message in loop_messages %}"
	"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
	"+ message['content'] | trim + '<|eot_id|>' %}";

static const char llama2_template[] =
	"{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
	"content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}";

static const struct pg_chat_msg user_only[] = {
	{ "user", "Hi" },
};

static const struct pg_chat_msg full[] = {
	{ "system", "Be brief." },
	{ "user", " Hi there \n" },
	{ "assistant", "Hello! " },
	{ "user", "More?" },
};

static void expect(enum pg_chat_format fmt, const struct pg_chat_msg *m,
		   int n, int add_assistant, const char *dflt,
		   const char *want)
{
	char *out = NULL;
	int rc = pg_chat_render(fmt, m, n, add_assistant, dflt, &out);

	CHECK(rc == 0 && out && !strcmp(out, want),
	      "%s (%d messages, add_assistant %d): rc %d\n  got:  %s\n  want: %s",
	      pg_chat_format_name(fmt), n, add_assistant, rc,
	      out ? out : "(null)", want);
	free(out);
}

static void test_detect(void)
{
	CHECK(pg_chat_detect(smol_template, strlen(smol_template)) == PG_CHAT_CHATML,
	      "SmolLM2 template");
	CHECK(pg_chat_detect(llama3_template, strlen(llama3_template)) == PG_CHAT_LLAMA3,
	      "Llama 3 template");
	CHECK(pg_chat_detect(llama2_template, strlen(llama2_template)) == PG_CHAT_LLAMA2,
	      "Llama 2 template");
	CHECK(pg_chat_detect(NULL, 0) == PG_CHAT_CHATML, "no template");
	CHECK(pg_chat_detect("{{ messages }}", 14) == -1, "unknown template");
	/* the length is honoured: the marker lies past it */
	CHECK(pg_chat_detect("xx<|im_start|>", 2) == -1, "length");
	CHECK(!strcmp(pg_chat_format_name(PG_CHAT_LLAMA2), "llama2"), "names");
}

static void test_chatml(void)
{
	expect(PG_CHAT_CHATML, user_only, 1, 0, SMOL_SYSTEM,
	       "<|im_start|>system\n" SMOL_SYSTEM "<|im_end|>\n"
	       "<|im_start|>user\nHi<|im_end|>\n");
	expect(PG_CHAT_CHATML, user_only, 1, 1, SMOL_SYSTEM,
	       "<|im_start|>system\n" SMOL_SYSTEM "<|im_end|>\n"
	       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
	expect(PG_CHAT_CHATML, user_only, 1, 1, NULL,
	       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
	expect(PG_CHAT_CHATML, full, 4, 1, SMOL_SYSTEM,
	       "<|im_start|>system\nBe brief.<|im_end|>\n"
	       "<|im_start|>user\n Hi there \n<|im_end|>\n"
	       "<|im_start|>assistant\nHello! <|im_end|>\n"
	       "<|im_start|>user\nMore?<|im_end|>\n<|im_start|>assistant\n");
	expect(PG_CHAT_CHATML, NULL, 0, 1, NULL, "<|im_start|>assistant\n");
}

static void test_llama3(void)
{
	expect(PG_CHAT_LLAMA3, user_only, 1, 1, NULL,
	       "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
	       "<|start_header_id|>assistant<|end_header_id|>\n\n");
	expect(PG_CHAT_LLAMA3, full, 4, 0, NULL,
	       "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
	       "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
	       "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
	       "<|start_header_id|>user<|end_header_id|>\n\nMore?<|eot_id|>");
	expect(PG_CHAT_LLAMA3, user_only, 1, 0, "Sys",
	       "<|start_header_id|>system<|end_header_id|>\n\nSys<|eot_id|>"
	       "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

static void test_llama2(void)
{
	expect(PG_CHAT_LLAMA2, user_only, 1, 1, NULL, "[INST] Hi [/INST]");
	expect(PG_CHAT_LLAMA2, full, 4, 1, NULL,
	       "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi there [/INST]"
	       " Hello! </s><s>[INST] More? [/INST]");
	expect(PG_CHAT_LLAMA2, user_only, 1, 0, "Sys",
	       "[INST] <<SYS>>\nSys\n<</SYS>>\n\nHi [/INST]");
}

static void test_errors(void)
{
	static const struct pg_chat_msg odd[] = {
		{ "user", "Hi" }, { "narrator", "Once upon a time" },
	};
	static const struct pg_chat_msg late_system[] = {
		{ "user", "Hi" }, { "system", "late" },
	};
	static const struct pg_chat_msg no_content[] = {
		{ "user", NULL },
	};
	char *out = (char *)1;

	for (int f = PG_CHAT_CHATML; f <= PG_CHAT_LLAMA2; f++) {
		CHECK(pg_chat_render(f, odd, 2, 1, NULL, &out) == -EINVAL && !out,
		      "%s: unknown role", pg_chat_format_name(f));
		CHECK(pg_chat_render(f, no_content, 1, 1, NULL, &out) == -EINVAL,
		      "%s: NULL content", pg_chat_format_name(f));
	}
	CHECK(pg_chat_render(PG_CHAT_LLAMA2, late_system, 2, 1, NULL, &out) == -EINVAL,
	      "llama2: system message after the first");
	CHECK(pg_chat_render(PG_CHAT_CHATML, user_only, -1, 1, NULL, &out) == -EINVAL,
	      "negative count");
	CHECK(pg_chat_render((enum pg_chat_format)7, user_only, 1, 1, NULL, &out) == -EINVAL,
	      "unknown format");
}

static void test_default_system(void)
{
	static const char computed[] =
		"<|im_start|>system\n{{ system_message }}<|im_end|>";
	char *sys = pg_chat_default_system(smol_template, strlen(smol_template));

	CHECK(sys && !strcmp(sys, SMOL_SYSTEM), "SmolLM2's default system: %s",
	      sys ? sys : "(none)");
	free(sys);
	CHECK(!pg_chat_default_system(llama3_template, strlen(llama3_template)),
	      "Llama 3's template has no default system message");
	CHECK(!pg_chat_default_system(computed, strlen(computed)),
	      "a computed system message is not a default");
	CHECK(!pg_chat_default_system(NULL, 0), "no template");
}

int main(void)
{
	test_default_system();
	test_detect();
	test_chatml();
	test_llama3();
	test_llama2();
	test_errors();
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
