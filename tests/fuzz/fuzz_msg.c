/*
 * fuzz_msg.c - libFuzzer target for the message decoder.
 *
 * Invariants checked on every input: msg_decode never crashes or reads past
 * the buffer (ASan), answers a known IG_E_* code with a message, and whatever
 * it accepts re-encodes to bytes that decode to an equal message.
 * Built with -Dfuzz=true and clang as a libFuzzer binary (make fuzz); in
 * every other build the same entry point is linked with replay.c and runs
 * over the golden messages as a unit test, so the target always compiles.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ig_errbuf eb = {0};
	struct msg m, back;
	struct msg_buf b = {0};
	int rc = msg_decode(data, size, &m, &eb);

	if (!ig_err_known(rc))
		abort();
	if (rc != IG_E_OK) {
		if (eb.msg[0] == '\0')
			abort(); /* every refusal explains itself */
		return 0;
	}
	if (msg_encode(&m, msg_buf_write, &b, &eb) != IG_E_OK)
		abort(); /* accepted, so it must be encodable */
	if (msg_decode(b.p, b.n, &back, &eb) != IG_E_OK || !msg_equal(&m, &back))
		abort();
	msg_buf_release(&b);
	return 0;
}
