/*
 * llama_oracle.h - the part of libllama the oracle tests call (llama.cpp as
 * the pinned npm package @node-llama-cpp/linux-x64 3.22.1 ships it, its
 * "v0.5.0"), loaded with dlopen from $IGNIS_ORACLE_LIB_DIR.
 *
 * Three structs cross by value (model and context parameters, a batch), so
 * their layouts are declared here field for field, in our words, and
 * llo_open checks them against the library's known defaults before any use:
 * a different layout fails the test instead of loading garbage. Header-only:
 * each oracle test includes it once, and ignis-bench's llama part.
 *
 * The CPU variant. The package ships llama.cpp's CPU backend built for a
 * dozen instruction sets, and ggml loads the best one the machine runs. Their
 * numerics differ: on a CPU with AVX512-FP16 the sapphirerapids build does
 * f16 arithmetic natively, and a qwen3next file in F16 then parts from the
 * others by 8% of the logits' spread (the other variants agree within
 * 0.2%). An oracle that changes with the machine is no oracle, so the tests
 * load one variant, LLO_VARIANT (AVX2 with FMA and F16C, which every x86-64
 * server of the last decade runs; the baseline x64 build where the CPU
 * lacks it), through a private folder that holds only it (llo_open).
 * ignis-bench compares speeds and loads the fastest (llo_open_fastest).
 */
#ifndef IGNIS_TESTS_LLAMA_ORACLE_H
#define IGNIS_TESTS_LLAMA_ORACLE_H

#include <dirent.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct llo_model_params {
	void *devices;
	const void *tensor_buft_overrides;
	int32_t n_gpu_layers;
	int32_t split_mode;
	int32_t load_mode;
	int32_t lazy_mode;
	int32_t main_gpu;
	const float *tensor_split;
	void *progress_callback;
	void *progress_callback_user_data;
	const void *kv_overrides;
	bool vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp;
};

struct llo_context_params {
	uint32_t n_ctx, n_batch, n_ubatch, n_seq_max, n_rs_seq, n_outputs_max, n_outputs_max_per_seq;
	int32_t n_threads, n_threads_batch;
	int32_t ctx_type, rope_scaling_type, pooling_type, attention_type, flash_attn_type;
	float rope_freq_base, rope_freq_scale, yarn_ext_factor, yarn_attn_factor, yarn_beta_fast,
	    yarn_beta_slow;
	uint32_t yarn_orig_ctx;
	float defrag_thold;
	void *cb_eval, *cb_eval_user_data;
	int32_t type_k, type_v; /* ggml types: 0 F32, 1 F16 */
	void *abort_callback, *abort_callback_data;
	bool embeddings, offload_kqv, no_perf, op_offload, swa_full, kv_unified;
	void *samplers;
	size_t n_samplers;
	void *ctx_other;
};

struct llo_batch {
	int32_t n_tokens;
	int32_t *token;
	float *embd;
	int32_t *pos;
	int32_t *n_seq_id;
	int32_t **seq_id;
	int8_t *logits;
};

struct llo_chat_message {
	const char *role, *content;
};

struct llo {
	void *lib;
	void (*backend_init)(void);
	void (*load_backends)(const char *dir);
	struct llo_model_params (*model_defaults)(void);
	struct llo_context_params (*context_defaults)(void);
	void *(*load)(const char *path, struct llo_model_params p);
	void (*free_model)(void *m);
	void *(*init_context)(void *m, struct llo_context_params p);
	void (*free_context)(void *c);
	struct llo_batch (*batch_one)(int32_t *tokens, int32_t n);
	int32_t (*decode)(void *c, struct llo_batch b);
	float *(*logits_ith)(void *c, int32_t i);
	const void *(*vocab)(const void *m);
	int32_t (*n_tokens)(const void *v);
	int32_t (*tokenize)(const void *v, const char *text, int32_t len, int32_t *ids, int32_t cap,
	                    bool add_special, bool parse_special);
	int32_t (*piece)(const void *v, int32_t id, char *buf, int32_t len, int32_t lstrip,
	                 bool special);
	int32_t (*detokenize)(const void *v, const int32_t *ids, int32_t n, char *text, int32_t cap,
	                      bool remove_special, bool unparse_special);
	bool (*is_eog)(const void *v, int32_t id);
	void (*log_set)(void (*cb)(int level, const char *text, void *ud), void *ud);
	int32_t (*chat_apply)(const char *tmpl, const struct llo_chat_message *chat, size_t n,
	                      bool add_ass, char *buf, int32_t len);
	struct llo_batch (*batch_init)(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
	void (*batch_free)(struct llo_batch b);
	char dir[4096];
	char why[512]; /* llo_open's failure */
};

/* llama.cpp's log: silent, or on stderr when IGNIS_ORACLE_LOG is set (to
 * see why it refused a file). */
static void llo__quiet(int level, const char *text, void *ud)
{
	(void)level, (void)ud;
	if (getenv("IGNIS_ORACLE_LOG"))
		fputs(text, stderr);
}

static bool llo__sym(struct llo *o, void *field, const char *name)
{
	void *p = dlsym(o->lib, name);

	if (!p) {
		snprintf(o->why, sizeof o->why, "libllama has no %s", name);
		return false;
	}
	*(void **)field = p;
	return true;
}

#define LLO_VARIANT "haswell"

/* The variant the tests load on this CPU (the header says why). */
static const char *llo__variant(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? LLO_VARIANT : "x64";
#else
	return NULL; /* the package is x86-64's: elsewhere it does not load at all */
#endif
}

/*
 * Load ggml's backends from `dir`, of its CPU builds only `variant`'s: a
 * private folder of links to every file but the other libggml-cpu-*.so,
 * removed once loaded (the libraries stay mapped). False, with o->why, when
 * the folder cannot be made or the variant is not there.
 */
static bool llo__load_variant(struct llo *o, const char *dir, const char *variant)
{
	char tmp[] = "/tmp/ignis-oracle-XXXXXX", want[128], from[4400], to[4400];
	DIR *dp = opendir(dir);
	struct dirent *de;
	bool found = false;

	snprintf(want, sizeof want, "libggml-cpu-%s.so", variant);
	if (!dp || !mkdtemp(tmp)) {
		snprintf(o->why, sizeof o->why, "cannot list %s or make a folder in /tmp", dir);
		if (dp)
			closedir(dp);
		return false;
	}
	while ((de = readdir(dp))) {
		bool cpu = !strncmp(de->d_name, "libggml-cpu-", 12);

		if (de->d_name[0] == '.' || (cpu && strcmp(de->d_name, want)))
			continue;
		found |= cpu;
		snprintf(from, sizeof from, "%s/%s", dir, de->d_name);
		snprintf(to, sizeof to, "%s/%s", tmp, de->d_name);
		if (symlink(from, to))
			found = false, de = NULL;
		if (!de)
			break;
	}
	closedir(dp);
	if (found)
		o->load_backends(tmp);
	else
		snprintf(o->why, sizeof o->why, "%s has no %s", dir, want);
	/* the links go; what was loaded stays mapped */
	if ((dp = opendir(tmp))) {
		while ((de = readdir(dp)))
			if (de->d_name[0] != '.') {
				snprintf(to, sizeof to, "%s/%s", tmp, de->d_name);
				unlink(to);
			}
		closedir(dp);
	}
	rmdir(tmp);
	return found;
}

/*
 * Load the oracle: 1 ready, 0 not installed ($IGNIS_ORACLE_LIB_DIR unset or
 * without libllama: the caller skips), -1 broken (o->why says how). The CPU
 * backend is `variant`'s build, or the fastest this CPU runs when NULL.
 */
static int llo__open(struct llo *o, const char *variant)
{
	const char *d = getenv("IGNIS_ORACLE_LIB_DIR");
	char path[4200];
	struct llo_model_params mp;
	struct llo_context_params cp;

	memset(o, 0, sizeof(*o));
	if (!d || !*d)
		return 0;
	snprintf(o->dir, sizeof o->dir, "%s", d);
	snprintf(path, sizeof path, "%s/libllama.v0.5.0.so", d);
	if (access(path, R_OK))
		return 0;
	if (!(o->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
		snprintf(o->why, sizeof o->why, "cannot load %s: %s", path, dlerror());
		return -1;
	}
	if (!llo__sym(o, &o->backend_init, "llama_backend_init") ||
	    !llo__sym(o, &o->load_backends, "ggml_backend_load_all_from_path") ||
	    !llo__sym(o, &o->model_defaults, "llama_model_default_params") ||
	    !llo__sym(o, &o->context_defaults, "llama_context_default_params") ||
	    !llo__sym(o, &o->load, "llama_model_load_from_file") ||
	    !llo__sym(o, &o->free_model, "llama_model_free") ||
	    !llo__sym(o, &o->init_context, "llama_init_from_model") ||
	    !llo__sym(o, &o->free_context, "llama_free") ||
	    !llo__sym(o, &o->batch_one, "llama_batch_get_one") ||
	    !llo__sym(o, &o->decode, "llama_decode") ||
	    !llo__sym(o, &o->logits_ith, "llama_get_logits_ith") ||
	    !llo__sym(o, &o->vocab, "llama_model_get_vocab") ||
	    !llo__sym(o, &o->n_tokens, "llama_vocab_n_tokens") ||
	    !llo__sym(o, &o->tokenize, "llama_tokenize") ||
	    !llo__sym(o, &o->piece, "llama_token_to_piece") ||
	    !llo__sym(o, &o->detokenize, "llama_detokenize") ||
	    !llo__sym(o, &o->is_eog, "llama_vocab_is_eog") ||
	    !llo__sym(o, &o->log_set, "llama_log_set") ||
	    !llo__sym(o, &o->chat_apply, "llama_chat_apply_template") ||
	    !llo__sym(o, &o->batch_init, "llama_batch_init") ||
	    !llo__sym(o, &o->batch_free, "llama_batch_free"))
		return -1;
	mp = o->model_defaults();
	if (mp.n_gpu_layers != -1 || mp.split_mode != 1 || mp.load_mode != -1 || mp.lazy_mode != 1 ||
	    mp.main_gpu != 0 || mp.vocab_only || mp.check_tensors || !mp.use_extra_bufts ||
	    mp.no_host || mp.no_alloc || mp.load_mtp || mp.devices || mp.kv_overrides) {
		snprintf(o->why, sizeof o->why,
		         "libllama's llama_model_params is not the layout declared here");
		return -1;
	}
	cp = o->context_defaults();
	if (cp.n_ctx != 512 || cp.n_batch != 2048 || cp.n_ubatch != 512 || cp.n_seq_max != 1 ||
	    cp.n_outputs_max_per_seq != 1 || cp.flash_attn_type != -1 || cp.yarn_ext_factor != -1.0f ||
	    cp.defrag_thold != -1.0f || cp.type_k != 1 || cp.type_v != 1 || cp.embeddings ||
	    !cp.offload_kqv || !cp.no_perf || !cp.op_offload || !cp.swa_full || cp.kv_unified ||
	    cp.samplers || cp.n_samplers || cp.ctx_other) {
		snprintf(o->why, sizeof o->why,
		         "libllama's llama_context_params is not the layout declared here");
		return -1;
	}
	o->log_set(llo__quiet, NULL);
	o->backend_init();
	if (!variant)
		o->load_backends(o->dir);
	else if (!llo__load_variant(o, o->dir, variant))
		return -1;
	return 1;
}

/* The oracle of the tests: one CPU variant whatever the machine. */
static inline int llo_open(struct llo *o)
{
	return llo__open(o, llo__variant());
}

/* The oracle at its fastest on this CPU: for speed comparisons. */
static inline int llo_open_fastest(struct llo *o)
{
	return llo__open(o, NULL);
}

#endif
