/*
 * knobs.h - every configuration knob, declared once.
 *
 * A knob's NAME gives all its spellings: the flag "--NAME", the variable
 * "IGNIS_" + NAME upper-cased with '-' as '_', and the YAML key NAME with '-'
 * as '_'. Flag parsing, the environment overlay, the YAML schema, profiles,
 * `ignis-supervisor --help`, docs/reference/knobs.md and the Makefile's
 * variables (KNOB_MAKE_VARS, tools/knobs.mk) are all derived from this
 * table (tests walk every row).
 *
 * Precedence: flag > environment > YAML > profile > per-model default >
 * built-in default. A knob that the model refuses refuses the start when named
 * by flag, variable or file, and is passed over when a profile sets it.
 *
 * X(ID, "name", type, "default", refused_by, "accepted", "doc")
 *   default:  "" none (derived or unset); "@model" the model's own default
 *   accepted: COUNT ranges (required), BYTES ranges (NULL: any size);
 *             ENUM "a|b|c"; others NULL
 *
 * Ranges: alternatives "R|R|...", each R one value "N", a closed range
 * "LO..HI" or an open one "LO.." (LO or more), ascending and apart. An end is
 * a size or a count as the knob is written (K, M, G, T binary), less any
 * "-N" terms: "4K..4G-1" is 4,096 to 4,294,967,295. The parser refuses a
 * value outside them, naming them; `--help` and the reference page show
 * them. A limit of a knob lives here, not in the code that reads the knob.
 */
#ifndef IGNIS_COMMON_KNOBS_H
#define IGNIS_COMMON_KNOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "model.h"

/* A number's spelling, for a default that a constant elsewhere holds. */
#define KNOB__STR2(x) #x
#define KNOB__STR(x)  KNOB__STR2(x)

enum knob_type {
	KT_BYTES = 1, /* size: 1536M, 2G (binary) */
	KT_POOL,      /* size or tokens: 2G, 512Ktok */
	KT_COUNT,     /* whole number, K/M suffixes allowed: 131072, 128K */
	KT_BOOL,      /* on|off (also true/false, yes/no, 1/0) */
	KT_SWITCH,    /* a flag without a value; on|off elsewhere */
	KT_ENUM,      /* one of `accepted` */
	KT_MODEL,     /* a built-in model name or alias */
	KT_PATH,      /* an absolute path */
	KT_ADDR,      /* an nng listen address: ipc:///abs/path or tcp://HOST:PORT */
	KT_HOSTPORT,  /* HOST:PORT (an HTTP listener) */
	KT_LISTEN,    /* HOST:PORT, or off (an HTTP listener one may turn off) */
	KT_REMOVED,   /* refuses the start, naming its replacement */
	KT_SECRET,    /* a key: 1 to 256 visible ASCII characters; never shown */
	KT_ORIGINS,   /* web origins: scheme://host[:port], comma-separated */
	KT_NAMES,     /* names a client may send, comma-separated (a YAML list too) */
};

/* The most names a KT_NAMES knob holds, and the longest name: the request's
 * `model` is read into 128 bytes (supervisor/oai.h). */
#define KNOB_NAMES_MAX    16u
#define KNOB_NAME_MAX_LEN 127u

/*
 * Why the sizes' ranges are what they are (the counts' are the model's and
 * the plan's sanity limits):
 *   move windows 4K..4G-1      a window travels as an arena window: its length
 *                              is 32-bit on the wire (plan, kv_reserve), and
 *                              at least a page
 *   reuse-kv-ram-bytes         the arena's (kvstore-daemon/arena.c): one 64 KiB
 *     64K..256T-256M-64K       block at least, and its index counts the blocks
 *                              and 4,096 more window records in 32 bits:
 *                              (2^32 - 1 - 4,096) blocks at most; test_arena
 *                              holds the arena to this row
 *   reuse-kv-disk-bytes        0 is off; on, a ceiling of one window (64 KiB,
 *     0|64K..                  the daemon's min_bytes to kvdisk_open) at least
 */
#define KNOB_REFUSE_DENSE 1u /* the 27B's family refuses it */
#define KNOB_REFUSE_MOE   2u /* Flash-Next's family refuses it */

#define KNOBS(X)                                                                                   \
	X(PROFILE, "profile", KT_ENUM, "cpu", 0, "cpu|rtx5090|none",                               \
	  "Bundle of defaults: cpu (the embedded default: cpu backend, a 64 MiB simulated "        \
	  "device for the tiny models), rtx5090 (the reference's values) or none.")                \
	X(MODEL, "model", KT_MODEL, "tiny-chat", 0, NULL,                                          \
	  "The model: qwen3.8-27b (27b), qwen3.8-flash-next (flash-next), tiny-chat (synthetic, "  \
	  "with a chat template), tiny-dense, tiny-moe, or a model file (a path; ignis-mkmodel "   \
	  "writes them).")                                                                         \
	X(BACKEND, "backend", KT_ENUM, "auto", 0, "auto|cpu|cuda",                                 \
	  "Compute backend: cpu, or cuda (the plan reserves a CUDA context on cuda only); auto: "  \
	  "cuda when this build has CUDA and NVML finds a device, else cpu.")                      \
	X(DEVICE_FREE_BYTES, "device-free-bytes", KT_BYTES, "", 0, NULL,                           \
	  "Device memory free at start, as a GPU reports it: the size of the cpu backend's "       \
	  "simulated device, and how `plan` sizes a card that is not here. A cuda start reads "    \
	  "the real figure once (NVML) and ignores this.")                                         \
	X(MODEL_MAX_CONTEXT, "model-max-context", KT_COUNT, "@model", 0, "64..16777216",           \
	  "Longest sequence, prompt and output, in tokens.")                                       \
	X(MODEL_PREFILL_CHUNK, "model-prefill-chunk", KT_COUNT, "@model", 0, "1..1048576",         \
	  "Tokens prefilled per chunk; sizes the workspace line.")                                 \
	X(MODEL_KV_FORMAT, "model-kv-format", KT_ENUM, "fp8", 0, "bf16|fp8|compact",               \
	  "KV format: bf16 (exact), fp8 (e4m3, half of bf16) or compact (72 B per token per "      \
	  "KV head and role at head dim 256). README: reading the plan.")                          \
	X(MODEL_KV_WINDOW, "model-kv-window", KT_COUNT, KNOB__STR(MDESC_KV_WINDOW_DEFAULT), 0,     \
	  "0..65536",                                                                              \
	  "Compact KV only: each sequence's newest tokens that attention reads in bf16 (the "      \
	  "residual window; with the first --model-kv-sinks tokens), in the plan's "               \
	  "hq_residual_window line per lane and device retained slot. 0: none.")                   \
	X(MODEL_KV_SINKS, "model-kv-sinks", KT_COUNT, KNOB__STR(MDESC_KV_SINKS_DEFAULT), 0,        \
	  "0..4096",                                                                               \
	  "Compact KV only: each sequence's first tokens kept in bf16 beside the window (the "     \
	  "attention sinks).")                                                                     \
	X(MODEL_DEFAULT_MAX_TOKENS, "model-default-max-tokens", KT_COUNT, "@model", 0,             \
	  "1..16777216",                                                                           \
	  "Output cap of a request that names none; admission reserves prompt + "                  \
	  "cap.")                                                                                  \
	X(SPEC_DECODE_LANES, "spec-decode-lanes", KT_COUNT, "@model", KNOB_REFUSE_DENSE, "1..8",   \
	  "Decode lanes, Flash-Next only (the 27B has 8 fixed).")                                  \
	X(VRAM_HEADROOM_BYTES, "vram-headroom-bytes", KT_BYTES, "1536M", 0, NULL,                  \
	  "Derives the budget: the device memory free at start minus this. Not with "              \
	  "--vram-budget-bytes.")                                                                  \
	X(VRAM_BUDGET_BYTES, "vram-budget-bytes", KT_BYTES, "", 0, NULL,                           \
	  "The device memory the whole process may hold, weights included. More than is free "     \
	  "refuses the start.")                                                                    \
	X(VRAM_ALLOW_OVERSUBSCRIPTION, "vram-allow-oversubscription", KT_SWITCH, "off", 0, NULL,   \
	  "With --vram-budget-bytes only: start above free memory (or below the plan's minimum) "  \
	  "with a warning instead of a refusal.")                                                  \
	X(VRAM_ADAPT_SPARE_TOKENS, "vram-adapt-spare-tokens", KT_COUNT, "65536", KNOB_REFUSE_MOE,  \
	  "0..16777216",                                                                           \
	  "The 27B only: at more than one decode lane, an adapted context is kept only when the "  \
	  "pool holds it and a spare reservation of this many tokens; 0, one sequence is "         \
	  "enough.")                                                                               \
	X(VRAM_ALLOW_EXPERT_CACHE_BELOW_FLOOR, "vram-allow-expert-cache-below-floor", KT_SWITCH,   \
	  "off", KNOB_REFUSE_DENSE, NULL,                                                          \
	  "Flash-Next only: start with an expert cache below its 12 GiB floor, with a warning.")   \
	X(VRAM_PINNED_EXPERT_BYTES, "vram-pinned-expert-bytes", KT_BYTES, "0", KNOB_REFUSE_DENSE,  \
	  NULL,                                                                                    \
	  "Flash-Next only: the hottest experts held in the expert cache for the whole load, up "  \
	  "to these bytes, ranked by the counts ignis-calibrate writes beside the model (needed "  \
	  "when offloaded); 0 pins none.")                                                         \
	X(VRAM_KV_POOL_BYTES, "vram-kv-pool-bytes", KT_POOL, "", 0, NULL,                          \
	  "The KV pool in bytes or tokens (512Ktok), replacing the policy's size. Resident: the "  \
	  "rest of the budget stays unused.")                                                      \
	X(REUSE_PROMPT, "reuse-prompt", KT_BOOL, "on", 0, NULL,                                    \
	  "off: no prompt checkpoint is captured or reused; retained slots default to 0, and "     \
	  "slots named hold shared prefixes only.")                                                \
	X(REUSE_RETAINED_DEVICE, "reuse-retained-device", KT_COUNT, "0", 0, "0..1024",             \
	  "Retained slots in VRAM, reserved in the plan.")                                         \
	X(REUSE_RETAINED_HOST, "reuse-retained-host", KT_COUNT, "@model", 0, "0..1024",            \
	  "Retained slots in one pinned host block (in the KV-RAM shared-memory object, beside "   \
	  "--reuse-kv-ram-bytes): two per decode lane of the 27B, 8 on Flash-Next, 0 with "        \
	  "--reuse-prompt off unless named.")                                                      \
	X(REUSE_RETAINED_INTERACTIVE_TTL, "reuse-retained-interactive-ttl", KT_COUNT, "300", 0,    \
	  "0..31536000",                                                                           \
	  "Idle seconds after which a main-conversation checkpoint in KV-RAM ranks as a "          \
	  "subagent's. Needs --reuse-prompt on.")                                                  \
	X(REUSE_MOVE_OUT_WINDOW_BYTES, "reuse-move-out-window-bytes", KT_BYTES, "12M", 0,          \
	  "4K..4G-1",                                                                              \
	  "A move out's window: the bytes a victim sends to KV-RAM between two decode rounds "     \
	  "(one window in flight, at most one new a round).")                                      \
	X(REUSE_MOVE_IN_WINDOW_BYTES, "reuse-move-in-window-bytes", KT_BYTES, "16M", 0,            \
	  "4K..4G-1",                                                                              \
	  "A move in's window: the bytes a restored sequence takes back between two rounds.")      \
	X(REUSE_KV_RAM_BYTES, "reuse-kv-ram-bytes", KT_BYTES, "2G", 0, "64K..256T-256M-64K",       \
	  "KV-RAM: the host arena moved sequences go to (the retained host slots come on top).")   \
	X(REUSE_KV_DISK_BYTES, "reuse-kv-disk-bytes", KT_BYTES, "@model", 0, "0|64K..",            \
	  "KV-disk ceiling; 0 turns KV-disk off (the 27B: off, Flash-Next: 4G).")                  \
	X(REUSE_KV_DISK_PATH, "reuse-kv-disk-path", KT_PATH, "", 0, NULL,                          \
	  "KV-disk's LMDB directory (default $XDG_STATE_HOME/ignis/kv-disk, else "                 \
	  "$HOME/.local/state/ignis/kv-disk).")                                                    \
	X(RETAINED_SLOTS, "retained-slots", KT_REMOVED, "", 0, NULL,                               \
	  "Removed: replaced by --reuse-retained-device and --reuse-retained-host.")               \
	X(SERVER_BIND, "server-bind", KT_ADDR, "", 0, NULL,                                        \
	  "The front door for clients (nng): ipc:///abs/path or tcp://HOST:PORT (default "         \
	  "ipc://<runtime-dir>/client.sock).")                                                     \
	X(SERVER_ALLOW_REMOTE, "server-allow-remote", KT_SWITCH, "off", 0, NULL,                   \
	  "Serve the nng front door on a tcp address other than loopback (it has no access "       \
	  "control: whoever reaches the address can submit and cancel requests), or the HTTP "     \
	  "API past loopback (with an API key, or --server-allow-remote-without-api-key).")        \
	X(SERVER_API_KEY, "server-api-key", KT_SECRET, "", 0, NULL,                                \
	  "The API key the HTTP API asks of every route but /health and /ready "                   \
	  "(Authorization: Bearer KEY, or X-Api-Key: KEY). Prefer --server-api-key-file: a flag "  \
	  "shows in the process list.")                                                            \
	X(SERVER_API_KEY_FILE, "server-api-key-file", KT_PATH, "", 0, NULL,                        \
	  "A file whose first line is the API key (as --server-api-key; the file wins over it).")  \
	X(SERVER_ALLOW_REMOTE_WITHOUT_API_KEY, "server-allow-remote-without-api-key", KT_SWITCH,   \
	  "off", 0, NULL,                                                                          \
	  "Serve the HTTP API past loopback with no API key: whoever reaches the address can "     \
	  "submit requests and read the metrics.")                                                 \
	X(SERVER_CORS_ORIGINS, "server-cors-origins", KT_ORIGINS, "", 0, NULL,                     \
	  "Web page origins whose requests the HTTP API serves, with CORS headers: "               \
	  "scheme://host[:port], comma-separated. A request from any other origin is refused.")    \
	X(SERVED_MODEL_NAME, "served-model-name", KT_NAMES, "", 0, NULL,                           \
	  "Names the HTTP API serves the model under: every one is taken as a request's "          \
	  "`model`, /v1/models lists them all, the first is the primary (default: the model's "    \
	  "own name). Comma-separated; a YAML list too.")                                          \
	X(SERVER_METRICS_BIND, "server-metrics-bind", KT_HOSTPORT, "127.0.0.1:9464", 0, NULL,      \
	  "Where the Prometheus metrics page (/metrics, HTTP) listens: HOST:PORT.")                \
	X(SERVER_HTTP_BIND, "server-http-bind", KT_LISTEN, "127.0.0.1:8000", 0, NULL,              \
	  "Where OpenAI's HTTP API (/v1/chat/completions, /v1/completions, /tokenize, "            \
	  "/detokenize, /v1/models, /health, /ready) listens: HOST:PORT, loopback unless "         \
	  "--server-allow-remote; off: none.")                                                     \
	X(SERVER_HTTP_MAX_CONNECTIONS, "server-http-max-connections", KT_COUNT, "0", 0, "0..1M",   \
	  "HTTP connections at once. 0: the descriptor limit (raised to its hard limit) less a "   \
	  "quarter of it, at most 1,024, kept for the rest of the supervisor.")                    \
	X(SERVER_HTTP_MAX_CONNECTIONS_PER_ADDRESS, "server-http-max-connections-per-address",      \
	  KT_COUNT, "0", 0, "0..1M",                                                               \
	  "HTTP connections at once from one client address. 0: half of "                          \
	  "--server-http-max-connections.")                                                        \
	X(SERVER_HTTP_HEADER_TIMEOUT, "server-http-header-timeout", KT_COUNT, "30", 0, "1..3600",  \
	  "Seconds an HTTP request's headers may take, counted from its connection's start or "    \
	  "its last answer: a connection idle or dribbling longer is closed.")                     \
	X(SERVER_HTTP_BODY_TIMEOUT, "server-http-body-timeout", KT_COUNT, "60", 0, "1..3600",      \
	  "Seconds an HTTP request's body may take after its headers.")                            \
	X(SERVER_MAX_QUEUED, "server-max-queued", KT_COUNT, "4096", 0, "16..65536",                \
	  "Submits the front door holds waiting for a worker slot (beyond "                        \
	  "--server-max-requests), "                                                               \
	  "from every client, nng and HTTP; past it, the client holding the most gives way, or "   \
	  "the submit is refused. Each holds its prompt (16 KiB of text and its ids at most).")    \
	X(SERVER_MAX_REQUESTS, "server-max-requests", KT_COUNT, "1024", 0, "1..4096",              \
	  "Requests the gpu-worker holds at once: running, waiting there for room, or finished "   \
	  "and not yet read. Beyond them the front door holds submits (--server-max-queued) "      \
	  "until one leaves, each client taking its turn.")                                        \
	X(RUNTIME_DIR, "runtime-dir", KT_PATH, "", 0, NULL,                                        \
	  "Directory of the control sockets (default $XDG_RUNTIME_DIR/ignis, else "                \
	  "/tmp/ignis-$UID).")

enum knob_id {
#define KNOB__ENUM(ID, name, type, def, refused, acc, doc) KNOB_##ID,
	KNOBS(KNOB__ENUM)
#undef KNOB__ENUM
	    KNOB__COUNT
};

/*
 * Profiles: X(profile, ID, family (0 any, else MDESC_DENSE/MDESC_MOE), "value").
 * A family-specific row wins over an "any" row of the same profile and knob.
 */
#define KNOB_PROFILES(X)                                                                           \
	X("cpu", BACKEND, 0, "cpu")                                                                \
	X("cpu", DEVICE_FREE_BYTES, 0, "128M")                                                     \
	X("cpu", VRAM_HEADROOM_BYTES, 0, "8M")                                                     \
	X("cpu", REUSE_KV_RAM_BYTES, 0, "32M")                                                     \
	X("rtx5090", BACKEND, 0, "cuda")                                                           \
	X("rtx5090", VRAM_HEADROOM_BYTES, 0, "1536M")                                              \
	X("rtx5090", VRAM_HEADROOM_BYTES, MDESC_DENSE, "1200M")                                    \
	X("rtx5090", MODEL_MAX_CONTEXT, MDESC_DENSE, "786432")                                     \
	X("rtx5090", MODEL_MAX_CONTEXT, MDESC_MOE, "589824")                                       \
	X("rtx5090", SPEC_DECODE_LANES, MDESC_MOE, "3")                                            \
	X("rtx5090", VRAM_PINNED_EXPERT_BYTES, 0, "2G")                                            \
	X("rtx5090", MODEL_KV_FORMAT, 0, "compact")

struct knob_profile_row {
	const char *profile;
	enum knob_id id;
	unsigned family; /* 0 any, else MDESC_DENSE or MDESC_MOE */
	const char *value;
};

/* The rows of KNOB_PROFILES, for the reference page. */
extern const struct knob_profile_row knob_profile_rows[];
extern const size_t knob_nprofile_rows;

/*
 * The make variables: X(ID, "VAR"). `make run` and `make config` take
 * VAR=value for knob ID and pass it as its flag, --name=value; an empty
 * VAR is not given. The Makefile reads them from tools/knobs.mk, which
 * `ignis-supervisor makevars` writes from this list (tests: makevars-fresh
 * fails when the file is stale, make-vars when a target does not pass one).
 * A list beside KNOBS rather than a column of it: few knobs have a make
 * variable, and a knob added without one is not touched here. A name is a
 * make and shell identifier, none of the Makefile's own (BUILD, CONFIG,
 * FUZZ_SECONDS: test_knobs).
 */
#define KNOB_MAKE_VARS(X)                                                                          \
	X(PROFILE, "PROFILE")                                                                      \
	X(MODEL, "MODEL")                                                                          \
	X(BACKEND, "BACKEND")                                                                      \
	X(DEVICE_FREE_BYTES, "DEVICE_FREE_BYTES")                                                  \
	X(MODEL_MAX_CONTEXT, "CONTEXT")                                                            \
	X(SPEC_DECODE_LANES, "LANES")                                                              \
	X(VRAM_ALLOW_EXPERT_CACHE_BELOW_FLOOR, "ALLOW_EXPERT_CACHE_BELOW_FLOOR")                   \
	X(VRAM_PINNED_EXPERT_BYTES, "PINNED_EXPERT_BYTES")                                         \
	X(MODEL_KV_FORMAT, "KV_FORMAT")

/* Knob id's make variable ("LANES"), or NULL when it has none. */
const char *knob_make_var(enum knob_id id);

struct knob_def {
	enum knob_id id;
	const char *name;
	enum knob_type type;
	const char *def;
	unsigned refused_by;
	const char *accepted;
	const char *doc;
};

extern const struct knob_def knob_defs[KNOB__COUNT];

enum knob_src {
	KS_DEFAULT = 0, /* built-in or the model's default */
	KS_PROFILE,
	KS_YAML,
	KS_ENV,
	KS_FLAG,
};

/* Raw text of a knob from one source, before parsing. */
struct knob_raw {
	const char *text; /* NULL: not given by this source */
	char where[160];  /* "--model", "IGNIS_MODEL", "ignis.yaml:3" */
};

/* Loads the description of a model file named by --model (a path): returns
 * it (valid while the caller keeps the file open) or NULL with `eb` set. */
typedef const struct mdesc *(*knob_model_loader)(void *ctx, const char *path, const char *where,
                                                 struct ig_errbuf *eb);

/* What the sources said, gathered by the caller (flags, environment, file). */
struct knob_input {
	struct knob_raw flag[KNOB__COUNT];
	struct knob_raw env[KNOB__COUNT];
	struct knob_raw yaml[KNOB__COUNT];
	knob_model_loader load_model; /* NULL: only built-in models */
	void *load_ctx;
};

/* A resolved knob. */
struct knob_value {
	bool set;    /* false: no value (e.g. no explicit budget) */
	uint64_t u;  /* bytes, count, bool, enum index */
	bool tokens; /* KT_POOL given in tokens */
	const char *
	    s; /* KT_PATH, KT_ADDR, KT_HOSTPORT, KT_LISTEN, KT_MODEL text (points into the input) */
	enum knob_src src;
	char where[160]; /* for messages: "--x", "IGNIS_X", "f.yaml:3", "profile rtx5090",
	                    "default", "qwen3.8-27b's default" */
};

struct knobs {
	struct knob_value v[KNOB__COUNT];
	const struct mdesc *model;
	const char *profile;
	uint32_t lanes; /* the model's fixed lanes or --spec-decode-lanes */
};

/*
 * IGNIS_* variables that are not knobs but that a program, a script or a test
 * reads: never warned about (knob_env_unknown). A name ending in '*' is a
 * prefix. X("NAME", "who reads it, for what")
 */
#define KNOB_OTHER_VARS(X)                                                                         \
	X("IGNIS_CONFIG", "tools/run.sh (make run): the configuration file to start with")         \
	X("IGNIS_KVSTORED", "tests and ignis-bench: the ignis-kvstored to start")                  \
	X("IGNIS_SUPERVISOR", "tests: the ignis-supervisor to run")                                \
	X("IGNIS_GOLDEN_DIR", "test_msg: the golden bytes (tests/golden)")                         \
	X("IGNIS_UPDATE_GOLDEN",                                                                   \
	  "test_msg, test_protodoc, test_anthropic, test_responses: rewrite the golden bytes, "    \
	  "the examples, the pinned streams")                                                      \
	X("IGNIS_SEED", "test_gguf: the seed of the random corruptions")                           \
	X("IGNIS_ORACLE_LIB_DIR",                                                                  \
	  "the oracle tests: llama.cpp's libraries (tools/install-oracle.sh)")                     \
	X("IGNIS_ORACLE_LOG", "the oracle tests: llama.cpp's log on stderr")                       \
	X("IGNIS_OPENAI_MODULE", "http.sh: OpenAI's npm client (tools/install-oracle.sh)")         \
	X("IGNIS_ANTHROPIC_MODULE",                                                                \
	  "anthropic.sh: Anthropic's npm client (tools/install-oracle.sh)")                        \
	X("IGNIS_DUMP_PAGE",                                                                       \
	  "test_metrics: write the page it rendered there (to update want_page)")                  \
	X("IGNIS_ORACLE_MEASURE",                                                                  \
	  "test_model_oracle: print each row's discrepancy, assert nothing")                       \
	X("IGNIS_QWEN3_TOKENIZER",                                                                 \
	  "test_bpe_oracle: the Qwen3 tokenizer.json (tools/install-oracle.sh)")                   \
	X("IGNIS_QWEN3_TOKENIZER_CONFIG",                                                          \
	  "test_chat: Qwen3's tokenizer_config.json, its chat template")                           \
	X("IGNIS_JINJA_MODULE",                                                                    \
	  "test_chat: Hugging Face's Jinja engine (@huggingface/jinja, tools/install-oracle.sh)")  \
	X("IGNIS_JINJA_RENDER", "test_chat: tests/unit/jinja-render.cjs, the engine's driver")     \
	X("IGNIS_LLAMA_TEMPLATES",                                                                 \
	  "test_chat, tools-xml.sh: llama.cpp's Qwen3.5 and Qwen3-Coder templates "               \
	  "(tools/install-oracle.sh)")                                                             \
	X("IGNIS_SCHED_*", "test_schedscript: the scripts, a filter, a trace")                     \
	X("IGNIS_GPU_*", "tools/gpu-check.sh: build folder, targets, budget, .debs, commit")       \
	X("IGNIS_TEST_*", "tests and the daemons' test hooks (IGNIS_TEST_SEED, "                   \
	                  "IGNIS_TEST_KVDISK_IGNORE_VOLUME, IGNIS_TEST_SLOT_WRITE_STALE_S)")

struct knob_other_var {
	const char *name; /* "IGNIS_X", or a prefix "IGNIS_X_*" */
	const char *who;
};

extern const struct knob_other_var knob_other_vars[];
extern const size_t knob_nother_vars;

/* Spellings. */
void knob_flag(enum knob_id id, char *out, size_t cap);     /* "--vram-budget-bytes" */
void knob_env(enum knob_id id, char *out, size_t cap);      /* "IGNIS_VRAM_BUDGET_BYTES" */
void knob_yaml_key(enum knob_id id, char *out, size_t cap); /* "vram_budget_bytes" */
/* Human text of what a knob accepts. */
const char *knob_accepted_text(enum knob_id id, char *buf, size_t cap);

/* One alternative of a knob's ranges: lo..hi, both included (hi UINT64_MAX
 * for an open range "LO.."). */
struct knob_range {
	uint64_t lo, hi;
};

/* The ranges of knob `id`'s `accepted` (a COUNT's, a BYTES's), up to `cap`
 * of them in `out`: how many there are, 0 when it declares none, -1 when
 * they do not parse or are not ascending and apart (a defect of the table:
 * test_knobs walks every row). */
int knob_ranges(enum knob_id id, struct knob_range *out, size_t cap);

/* Fill `in->env` from the process environment. */
void knob_read_env(struct knob_input *in);

/* How a knob is spelled in a source, for knob_nearest. */
enum knob_spelling { KNOB_AS_FLAG, KNOB_AS_ENV, KNOB_AS_YAML };

/* The knob whose spelling is nearest to the `n` bytes at `name`: the fewest
 * edits (insertions, deletions, substitutions, swaps of two neighbours), a
 * name that a spelling begins with counting as one ("IGNIS_REUSE_KV_RAM"
 * gives IGNIS_REUSE_KV_RAM_BYTES); ties to the longer common beginning, then
 * the earlier row. Removed knobs are never proposed. */
enum knob_id knob_nearest(const char *name, size_t n, enum knob_spelling as);

/* An IGNIS_* variable that no knob reads. */
struct knob_env_unknown {
	const char *name; /* into the environment string: "IGNIS_X=..." */
	size_t len;       /* of the name, up to the '=' */
	enum knob_id nearest;
};

/*
 * The variables of `envp` ("NAME=value" strings, NULL-terminated, as
 * `environ`) whose name begins "IGNIS_", whose value is not empty (an empty
 * variable counts as unset, as for the knobs), and that are neither a
 * knob's variable nor in KNOB_OTHER_VARS, each with the nearest knob. Fills
 * up to `cap` of them in `out` (valid while `envp` is) and returns how many
 * there are.
 */
size_t knob_env_unknown(char *const *envp, struct knob_env_unknown *out, size_t cap);

/* Resolve every knob (precedence above) and apply the cross-knob rules.
 * IG_E_CONFIG with the key, its source and what is accepted in `eb`. */
int knob_resolve(const struct knob_input *in, struct knobs *out, struct ig_errbuf *eb);

/* Parse one value of knob `id` (exposed for tests). */
int knob_parse(enum knob_id id, const char *text, const char *where, struct knob_value *out,
               struct ig_errbuf *eb);

#endif
