/*
 * ignis-gpu-worker - owns device memory, the model, the kernels, the paged KV
 * pool and the scheduler. So far: it starts, says hello, answers pings and
 * exits cleanly when asked, and reports which compute backends this build has.
 */
#include "backend.h"
#include "daemon.h"

static const struct dmn_spec worker_spec = {
    .role = "gpu-worker",
    .program = "ignis-gpu-worker",
    .sockname = "gpu-worker",
    .summary = "The Ignis GPU worker: device memory, model, KV pool, scheduler.",
    .ready_fields = backend_ready_fields,
};

int main(int argc, char **argv)
{
	struct dmn_args args;
	int rc = dmn_parse_args(&worker_spec, argc, argv, &args);

	if (rc)
		return rc > 0 ? 0 : 2;
	return dmn_run(&worker_spec, &args);
}
