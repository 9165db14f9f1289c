/*
 * mfile.h - model files: our family (GGUF, architecture "ignis-hybrid") and
 * llama.cpp's "qwen3" (docs/adr/0031), "qwen35", "qwen35moe" and
 * "qwen3next" (docs/adr/0033): the description a file carries, checked
 * against the tensors it holds, and the writer of synthetic models with
 * seeded random weights in any of these layouts (ignis-mkmodel).
 *
 * Our metadata keys are declared once (MFILE_KEYS in mfile.c, published as
 * mfile_keys[]); the reader, the writer, the checks and ignis-mkmodel's
 * --set all walk that table. Beside them a file names its family
 * ("ignis.family") and its tokenizer (MFILE_TOKENIZER_KEY), both strings. A
 * llama.cpp file is read by its own keys into the same description. The
 * tensor list is the description's (mdesc_for_each_tensor, in the layout's
 * names): a file must hold exactly those tensors, with exactly those dims,
 * in a type quant.h reads, and the tensors of its MTP blocks (not read).
 * A gpt2 vocabulary and a chat template are checked at open (bpe.h, chat.h).
 * docs/adr/0006.
 *
 * Synthetic models are written through the GGUF writer's streaming mode:
 * each tensor's values are generated chunk by chunk straight into the
 * writer's buffer (splitmix64 allows a jump to any element), so memory use
 * does not depend on the model's size and a reference shape of tens of GB
 * costs the same few MiB as a tiny one.
 */
#ifndef IGNIS_GPU_WORKER_MFILE_H
#define IGNIS_GPU_WORKER_MFILE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "gguf.h"
#include "common/model.h"

#define MFILE_ARCH "ignis-hybrid"
/* llama.cpp's first architecture (docs/adr/0031), and all that load. */
#define MFILE_ARCH_QWEN3 "qwen3"
#define MFILE_ARCHS      "ignis-hybrid, qwen3, qwen35, qwen35moe or qwen3next"
/* What a qwen3 file does not carry, Ignis's knobs: 4 fixed decode lanes, a
 * prefill chunk of 512 tokens, 512 tokens when a request names no cap. */
#define MFILE_QWEN3_LANES      4u
#define MFILE_QWEN3_CHUNK      512u
#define MFILE_QWEN3_MAX_TOKENS 512u
/* The MoE hybrids' (qwen35moe, qwen3next) knobs, which the file does not
 * carry (docs/adr/0033): decode lanes 4 by default, up to 8; 8 retained host
 * slots; an offloaded pool of 8192 pages; the expert cache's floor 12 GiB,
 * or every expert's bytes when they weigh less. */
#define MFILE_LLAMA_MOE_LANES         4u
#define MFILE_LLAMA_MOE_MAX_LANES     8u
#define MFILE_LLAMA_MOE_RETAINED_HOST 8u
#define MFILE_LLAMA_MOE_POOL_PAGES    8192u
#define MFILE_LLAMA_MOE_FLOOR         (12ull << 30)
/* A synthetic qwen3 file's vocabulary: the 256 byte tokens, <|endoftext|>,
 * <|im_start|>, <|im_end|> (its eos); more rows are padding (common/model.h,
 * where the built-in tiny-chat takes its eos from). */
#define MFILE_QWEN3_VOCAB MDESC_SYNTH_GPT2_VOCAB
#define MFILE_QWEN3_EOS   MDESC_SYNTH_GPT2_EOS

/* The largest value a U32 key may take (2^24): two shapes multiplied (a
 * matrix, 2^48 elements) always fit in 64 bits with room for the sums; a
 * product of three (an expert tensor) that would pass 2^63 elements is
 * refused by the GGUF layer as an overflow, never wrapped. */
#define MFILE_DIM_MAX (1u << 24)

/*
 * Counts that size walks and tables, with their own bounds below
 * MFILE_DIM_MAX (checked before the description is walked):
 *   MFILE_LAYERS_MAX   blocks (block_count, MTP blocks included): the
 *                      deepest models in use have 126 layers (Llama 3.1
 *                      405B; the 27B 64); 4096 is 32 times that. The reader
 *                      walks every layer's tensors, the plan and the worker
 *                      keep per-layer tables.
 *   MFILE_EXPERTS_MAX  routed experts a layer: the most in use are 512
 *                      (Flash-Next, Qwen3-Next); 65536 is 128 times that.
 *                      The expert cache and the counts of a calibration keep
 *                      an entry per expert of each layer.
 * And a file's tensor table must hold its layers: each has at least
 * MFILE_LAYER_MIN_TENSORS tensors (a dense full-attention layer's attn_norm,
 * q, k, v, their two norms, output, ffn_norm, gate, up and down: the fewest
 * of any layout), so block_count x that is at most the file's tensors.
 */
#define MFILE_LAYERS_MAX        4096u
#define MFILE_EXPERTS_MAX       65536u
#define MFILE_LAYER_MIN_TENSORS 11u

/* The key naming a file's tokenizer, GGUF's own: "bytes" (the byte-level
 * tokenizer, exactly MDESC_BYTES_VOCAB ids) or "none" (token ids only). A
 * file without it, or naming another, is refused (docs/adr/0025); the
 * writer writes the description's (mdesc_tokenizer_name). */
#define MFILE_TOKENIZER_KEY "tokenizer.ggml.model"

struct mfile {
	struct gguf g;
	struct mdesc desc; /* shapes and figures from the file; name points into `name` */
	char name[64];
	uint64_t mtp_tensors; /* tensors of MTP blocks: in the file, not read */
};

/* Open and check `path`. On success the caller owns `f` until mfile_close;
 * f->desc describes the file (weights and experts summed from its tensors). */
int mfile_open(struct mfile *f, const char *path, struct ig_errbuf *eb);
void mfile_close(struct mfile *f);
/* What tells this file from another of the same shapes: a hash of its
 * header (every metadata key, the tokenizer's vocabulary and merges among
 * them, and the tensors' table), its size, and the first and last 64 KiB of
 * its data (a fine-tune that kept every key differs there). Retained host
 * slots outlive a worker: their keys name the file by it (docs/adr/0038). */
uint64_t mfile_identity(const struct mfile *f);

/* ---- the metadata table ---------------------------------------------------- */

/* One metadata key of a model file and the mdesc field it fills. */
struct mfile_key {
	const char *key;     /* "ignis.block_count" */
	const char *field;   /* "layers": the struct mdesc field, ignis-mkmodel's --set name */
	enum gguf_type type; /* GGUF_TYPE_UINT32, _UINT64 or _FLOAT32 */
	int family;          /* 0: every model; MDESC_DENSE or MDESC_MOE: that family only */
	size_t offset;       /* of the field in struct mdesc */
	uint64_t min, max;   /* integers: the accepted range; FLOAT32: finite and > 0 */
};

/* In file order (the order the writer emits them). Static storage. */
extern const struct mfile_key mfile_keys[];
extern const size_t mfile_nkeys;

/* The row whose key or field is `name`, or NULL. */
const struct mfile_key *mfile_key_find(const char *name);
/* True when `k` applies to models of `family`. */
bool mfile_key_applies(const struct mfile_key *k, enum mdesc_family family);
/* The field of `k` in `m`, widened (U32 and U64 keys). */
uint64_t mfile_key_get(const struct mdesc *m, const struct mfile_key *k);
/* True when `a` and `b` agree on the family, the tokenizer and every key
 * that applies: the same file description (figures carried beside them are
 * not compared). */
bool mfile_same_shape(const struct mdesc *a, const struct mdesc *b);

/*
 * The checks mfile_open applies to the description a file states: every key
 * in its range, the shapes the plan and the runtime divide by or need to
 * agree (heads, rotary dims, the compact KV group, at least one
 * full-attention layer, lanes, experts), the tokenizer (one of ours; the
 * byte-level one with its MDESC_BYTES_VOCAB ids), derived figures without
 * overflow.
 * IG_E_INVAL with "inconsistent description: " and the keys (and fields) at
 * fault with their values and what is accepted; the caller prefixes the
 * subject. Only the fields the keys fill are read.
 */
int mfile_check_desc(const struct mdesc *m, struct ig_errbuf *eb);

/* ---- synthetic models ------------------------------------------------------ */

/* Tensor types a synthetic model can be written in (ggml's numbers). */
enum mfile_dtype {
	MFILE_BF16 = GGUF_TENSOR_BF16,
	MFILE_F16 = GGUF_TENSOR_F16,
	MFILE_F32 = GGUF_TENSOR_F32,
	MFILE_Q8_0 = GGUF_TENSOR_Q8_0,
	MFILE_Q4_0 = GGUF_TENSOR_Q4_0,
	MFILE_Q4_K = GGUF_TENSOR_Q4_K,
	MFILE_Q5_K = GGUF_TENSOR_Q5_K,
	MFILE_Q6_K = GGUF_TENSOR_Q6_K,
	/* not a tensor type: llama.cpp's Q4_K_M mix (mfile_tensor_type) */
	MFILE_Q4_K_M = 1015,
};

/*
 * The type tensor `name` (n_dims, dims) of a model `m` takes in a file
 * written at `dtype`. F32, F16 and BF16: every tensor. A block type (as
 * llama.cpp's quantizer does with 1-D tensors, and with the router, which
 * picks experts on small differences): the matrices whose rows are whole
 * blocks of it, the embedding and the output included; norms, the
 * convolution, the decay and bias vectors, the routers and the shared
 * expert's gate stay BF16. MFILE_Q4_K_M: Q4_K and Q6_K as llama.cpp's
 * Q4_K_M recipe gives them (attn_v, attn_qkv, ffn_down by layer; the output).
 * llama.cpp's layouts (m->arch): vectors, norms, routers and the
 * convolution F32, as its converter writes them.
 */
uint32_t mfile_tensor_type(const struct mdesc *m, enum mfile_dtype dtype, const char *name,
                           uint32_t n_dims, const uint64_t dims[4]);

/*
 * The shapes of a dense description `src` in llama.cpp's qwen3 layout, for
 * synthetic files that llama.cpp loads too: every layer full attention, no
 * output gate, the output tied to the embedding, rotary over the whole
 * head, the synthetic gpt2 vocabulary (at least MFILE_QWEN3_VOCAB rows), and
 * the knobs a qwen3 file gives (MFILE_QWEN3_*). Its name stays src's.
 */
void mfile_as_qwen3(const struct mdesc *src, struct mdesc *out);
/*
 * The same for any of llama.cpp's layouts (docs/adr/0033): qwen3 as above;
 * qwen35 a dense src's hybrid shapes with a gated attention (the output
 * gate in attn_q, as ours), qwen35moe and qwen3next a moe src's; the MoE
 * knobs of a llama.cpp file (MFILE_LLAMA_MOE_*). IG_E_INVAL naming what
 * does not fit: the family, or linear key and value lengths that differ
 * (llama.cpp takes them equal). `eb` may be NULL.
 */
int mfile_as_layout(const struct mdesc *src, enum mdesc_arch arch, struct mdesc *out,
                    struct ig_errbuf *eb);

/* What a synthetic file of a description would be, computed without writing. */
struct mfile_synthetic {
	/* The description mfile_open gives for the file: the keys' fields of
	 * the source, every figure derived or summed from the tensors at the
	 * dtype, exactly as from the file (figures the source carries are not
	 * in a file and are not copied). `desc.name` is the source's name. */
	struct mdesc desc;
	uint64_t file_bytes; /* the exact size of the file */
	uint64_t n_tensors;
	uint64_t data_bytes; /* the tensors' bytes, padding excluded */
};

/*
 * Describe the file mfile_write_synthetic(m, ..., dtype, ...) would write:
 * `m` is checked (mfile_check_desc), the writer's layout computed (the
 * same code as the write's), nothing is written. `out->desc.name` points at
 * m->name.
 */
int mfile_synthetic_describe(const struct mdesc *m, enum mfile_dtype dtype,
                             struct mfile_synthetic *out, struct ig_errbuf *eb);
/* The same for a file written with `o` (its chat template counts). */
struct mfile_wopts;
int mfile_synthetic_describe_opts(const struct mdesc *m, enum mfile_dtype dtype,
                                  const struct mfile_wopts *o, struct mfile_synthetic *out,
                                  struct ig_errbuf *eb);

/*
 * The synthetic values: elements [first, first + n) of tensor `name` of a
 * model drawn from `seed`, in `dtype`, into `out` (n x 2 or 4 bytes).
 * `fan_in` is the tensor's dims[0]. Each tensor is its own splitmix64 stream
 * keyed by the seed and the name; element i is the stream's (i+1)-th output
 * mapped to [-1, 1), then scaled by 1/sqrt(fan_in) for matrices, or set near
 * 1 for norms, in (0, 2.8] for decay logs, small for dt biases (ADR 0006).
 * Any range gives the bytes the whole tensor has there.
 */
void mfile_synthetic_fill(uint64_t seed, enum mfile_dtype dtype, const char *name, uint64_t fan_in,
                          uint64_t first, size_t n, void *out);
/* The same values as floats, before any rounding to a type (what a block
 * type's blocks encode). */
void mfile_synthetic_values(uint64_t seed, const char *name, uint64_t fan_in, uint64_t first,
                            size_t n, float *out);

/* Optional settings of a synthetic write; all zero gives the defaults. */
struct mfile_wopts {
	size_t chunk_bytes; /* the writer's chunk; 0: GGUF_WRITE_CHUNK */
	/* When non-NULL and set (by a signal handler), the write stops at the
	 * next chunk: IG_E_IO "interrupted", no file, no temporary file. */
	volatile sig_atomic_t *stop;
	/* When set: called after each chunk of tensor data with the bytes
	 * generated so far and the tensors' total (mfile_synthetic.data_bytes). */
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
	/* When set: every tensor F32, holding exactly the values its tensor at
	 * the dtype decodes to (a block type's blocks encoded and decoded). The
	 * same model as the dtype's file, which a peer computes in f32: the
	 * oracle's reference for our own decoding (test_model_oracle). */
	bool widen;
	/* When set: the tensors' bytes are a hole (gguf_writer.sparse): the
	 * file has the layout, the description and the exact size of the
	 * model, all-zero weights, and takes no room. */
	bool sparse;
	/* Fault injection for tests: gguf_writer.write_fn. */
	ssize_t (*write_fn)(int fd, const void *buf, size_t n);
	/* The chat template the synthetic vocabulary's file carries
	 * (tokenizer.chat_template; llama.cpp's layouts only); NULL: plain
	 * ChatML as Qwen2.5 writes it. A real model's template (Qwen3's, with
	 * tools) on a tiny model, for the tests of what the template renders. */
	const char *chat_template;
};

/*
 * Write a model of description `m` with weights drawn from `seed` (the same
 * seed gives the same bytes) to `path`, atomically (gguf_writer_write): the
 * description is checked as mfile_synthetic_describe does, so every file
 * written opens with mfile_open. Memory use is the writer's chunk plus the
 * tensor list, whatever the model's size. `o` may be NULL.
 */
int mfile_write_synthetic_opts(const struct mdesc *m, uint64_t seed, enum mfile_dtype dtype,
                               const char *path, const struct mfile_wopts *o, struct ig_errbuf *eb);
/* The same with the defaults. */
int mfile_write_synthetic(const struct mdesc *m, uint64_t seed, enum mfile_dtype dtype,
                          const char *path, struct ig_errbuf *eb);

#endif
