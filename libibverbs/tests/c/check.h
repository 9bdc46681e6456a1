/*
 * The check of the drop-in's C test programs: one line per check, "ok   "
 * or "FAIL " and the description, flushed at once (a program that crashes
 * after it still shows how far it got); `failures` counts the FAILs.
 */
#ifndef ROCE_TESTS_CHECK_H
#define ROCE_TESTS_CHECK_H
#include <stdio.h>

static int failures;
#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (cond) {                                                    \
			printf("ok   ");                                       \
		} else {                                                       \
			printf("FAIL ");                                       \
			failures++;                                            \
		}                                                              \
		printf(__VA_ARGS__);                                           \
		printf("\n");                                                  \
		fflush(stdout);                                                \
	} while (0)

#endif
