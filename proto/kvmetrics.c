/* kvmetrics.c - the kvstore daemon's figures as Prometheus text (kvmetrics.h). */
#include "kvmetrics.h"

#include <inttypes.h>
#include <string.h>

void kvm_write_prom(FILE *f, const struct msg_kv_stats_reply *r)
{
	const char *last = "";
	uint64_t ram_free_bytes = r->ram_bytes - r->ram_used_bytes;
	uint64_t ram_used_bytes = r->ram_used_bytes;
	uint64_t ram_evictions = r->ram_evictions, disk_used_bytes = r->disk_used_bytes;
	uint64_t disk_ceiling_bytes = r->disk_ceiling_bytes, demotions = r->demotions;
	uint64_t direct_writes = r->direct_writes;
	uint64_t lost = r->lost, ram_sequences = r->ram_sequences;
	uint64_t disk_sequences = r->disk_sequences, refusals_full = r->refusals_full;
	uint64_t slots_held = r->slots_held, slots_writing = r->slots_writing;
	uint64_t slots_free = r->slots - (r->slots_held + r->slots_writing <= r->slots
	                                      ? r->slots_held + r->slots_writing
	                                      : r->slots);
	uint64_t slot_skips_busy = r->slot_skips_busy,
	         slot_skips_duplicate = r->slot_skips_duplicate;
	uint64_t slot_skips_size = r->slot_skips_size, slot_skips_none = r->slot_skips_none;
	uint64_t slot_given_up = r->slot_given_up, slot_claims = r->slot_claims;
	uint64_t slot_claim_misses = r->slot_claim_misses;

#define KVM_ROW(family, type, label, value, help)                                                  \
	if (strcmp(last, #family)) {                                                               \
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", #family, help, #family, #type);         \
		last = #family;                                                                    \
	}                                                                                          \
	fprintf(f, "%s%s%s%s %" PRIu64 "\n", #family, label[0] ? "{" : "", label,                  \
	        label[0] ? "}" : "", value);
	KVM_ROWS(KVM_ROW)
#undef KVM_ROW
}
