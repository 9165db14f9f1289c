/*
 * test_rmsnorm_ref.c - kern_rmsnorm_f32_ref() against hand-computed rows.
 *
 * Every case is chosen so that mean(x^2) + eps is a power of four: the
 * inverse root is then an exact power of two and so is every expected value,
 * so the reference must match them exactly (tolerance 0).
 */
#include <stdio.h>
#include <string.h>

#include "gpu-worker/backend/cuda/kernels.h"

#define MAXN 8

struct rms_case {
	const char *name;
	int rows, cols;
	float eps;
	float x[MAXN];
	float w[MAXN];
	float want[MAXN];
};

static const struct rms_case cases[] = {
    /* mean = 4, inv = 1/2 */
    {"unit weight", 1, 4, 0.0f, {2, -2, 2, -2}, {1, 1, 1, 1}, {1, -1, 1, -1}},
    /* same row, the weight scales each column */
    {"weighted", 1, 4, 0.0f, {2, -2, 2, -2}, {1, 0.5f, 2, -1}, {1, -0.5f, 2, 1}},
    /* mean = (9 + 1) / 4 = 2.5, + eps 1.5 = 4, inv = 1/2 */
    {"eps adds to the mean", 1, 4, 1.5f, {3, 0, 0, -1}, {1, 1, 1, 1}, {1.5f, 0, 0, -0.5f}},
    /* mean = 0, + eps 1 = 1: a zero row stays zero, no NaN */
    {"zero row", 1, 4, 1.0f, {0, 0, 0, 0}, {1, 2, 3, 4}, {0, 0, 0, 0}},
    /* mean = 16, inv = 1/4 */
    {"one column", 1, 1, 0.0f, {-4}, {3}, {-3}},
    /* rows are independent: row 0 mean = 1 (inv 1), row 1 mean = 16 (inv 1/4) */
    {"two rows", 2, 2, 0.0f, {1, -1, 4, 4}, {1, 2}, {1, -2, 1, 2}},
};

int main(void)
{
	int failed = 0;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct rms_case *tc = &cases[i];
		int n = tc->rows * tc->cols;
		int bad = 0;
		float y[MAXN];

		memset(y, 0xff, sizeof(y)); /* NaN everywhere: catches unwritten outputs */
		kern_rmsnorm_f32_ref(tc->x, tc->w, y, tc->rows, tc->cols, tc->eps);
		for (int k = 0; k < n; k++) {
			if (y[k] != tc->want[k]) {
				printf("FAIL %s: y[%d] = %.9g, want %.9g\n", tc->name, k,
				       (double)y[k], (double)tc->want[k]);
				bad = 1;
			}
		}

		/* In place (x and y the same buffer) gives the same result. */
		float xy[MAXN];
		memcpy(xy, tc->x, sizeof(xy));
		kern_rmsnorm_f32_ref(xy, tc->w, xy, tc->rows, tc->cols, tc->eps);
		if (memcmp(xy, y, (size_t)n * sizeof(float)) != 0) {
			printf("FAIL %s: in place differs\n", tc->name);
			bad = 1;
		}
		printf("%s %s\n", bad ? "not ok" : "ok", tc->name);
		failed |= bad;
	}
	return failed;
}
