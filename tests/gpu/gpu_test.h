/*
 * gpu_test.h - what the device tests of tests/gpu/ share: the start that
 * skips without a device (exit 77, meson's skip, never a pass) and names
 * the seed a failure can be repeated with, and the seeded numbers.
 */
#ifndef IGNIS_TESTS_GPU_TEST_H
#define IGNIS_TESTS_GPU_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

/* splitmix64: small, seedable, the same sequence everywhere. */
static inline uint64_t gt_next_u64(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float gt_next_unit(uint64_t *s)
{
	return (float)((double)(gt_next_u64(s) >> 11) * 0x1.0p-52 - 1.0);
}

/* No CUDA device visible: exit 77 with a line saying why. Else the run's
 * seed: IGNIS_TEST_SEED when set, else `default_seed`, printed so that a
 * failure can be repeated. */
static inline uint64_t gt_start(uint64_t default_seed)
{
	int ndev = 0;
	cudaError_t rc = cudaGetDeviceCount(&ndev);
	const char *env = getenv("IGNIS_TEST_SEED");
	uint64_t seed = default_seed;

	if (rc != cudaSuccess || ndev < 1) {
		printf("skip: no CUDA device (%s)\n",
		       rc != cudaSuccess ? cudaGetErrorString(rc) : "device count 0");
		exit(77);
	}
	if (env && *env)
		seed = strtoull(env, NULL, 0);
	printf("seed %" PRIu64 " (IGNIS_TEST_SEED=%" PRIu64 " repeats this run)\n", seed, seed);
	return seed;
}

#endif
