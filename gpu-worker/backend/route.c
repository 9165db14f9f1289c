/* route.c - the mixture of experts' routing rule (see route.h). */
#include "route.h"

#include <stdbool.h>

float route_topk(const float *p, uint32_t experts, uint32_t k, uint32_t *id)
{
	float sum = 0.0f;

	for (uint32_t r = 0; r < k; r++) {
		uint32_t best = UINT32_MAX;

		for (uint32_t e = 0; e < experts; e++) {
			bool taken = false;

			for (uint32_t q = 0; q < r; q++)
				taken |= id[q] == e;
			if (!taken && (best == UINT32_MAX || p[e] > p[best]))
				best = e;
		}
		id[r] = best;
		sum += p[best];
	}
	return sum;
}
