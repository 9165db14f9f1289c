/*
 * ignis-kvstored - owns host KV memory (KV-RAM) and the LMDB disk tier
 * (KV-disk). So far: it starts, says hello, answers pings and exits cleanly
 * when asked; it can be restarted on its own by the supervisor.
 */
#include "daemon.h"

static const struct dmn_spec kvstore_spec = {
    .role = "kvstore",
    .program = "ignis-kvstored",
    .sockname = "kvstore",
    .summary = "The Ignis KV store daemon: KV-RAM and the LMDB KV-disk tier.",
    .ready_fields = NULL,
};

int main(int argc, char **argv)
{
	struct dmn_args args;
	int rc = dmn_parse_args(&kvstore_spec, argc, argv, &args);

	if (rc)
		return rc > 0 ? 0 : 2;
	return dmn_run(&kvstore_spec, &args);
}
