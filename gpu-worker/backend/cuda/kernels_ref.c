/*
 * kernels_ref.c - CPU references of the kernels in kernels.h: plain loops,
 * written for obviousness rather than speed, accumulating in double so the
 * reference is the more accurate side of every comparison.
 */
#include <math.h>
#include <stddef.h>

#include "kernels.h"

void kern_rmsnorm_f32_ref(const float *x, const float *w, float *y, int rows, int cols, float eps)
{
	for (int r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * (size_t)cols;
		float *yr = y + (size_t)r * (size_t)cols;
		double ss = 0.0;

		for (int c = 0; c < cols; c++)
			ss += (double)xr[c] * (double)xr[c];
		double inv = 1.0 / sqrt(ss / cols + (double)eps);

		for (int c = 0; c < cols; c++)
			yr[c] = (float)((double)xr[c] * inv * (double)w[c]);
	}
}
