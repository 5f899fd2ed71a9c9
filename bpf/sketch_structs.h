/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The admission sketch's element (sketch.h). */
#ifndef XDPLIMIT_SKETCH_STRUCTS_H
#define XDPLIMIT_SKETCH_STRUCTS_H

#include <linux/types.h>
#include "xdplimit_consts.h"

/* One cache line of a CPU's sketch region: a key's cells, XDPL_SKETCH_ROW_CELLS
 * of them for each row, row r's at [r * XDPL_SKETCH_ROW_CELLS]. One lookup
 * finds them all. */
struct xdpl_sketch_line {
	__u32 c[XDPL_SKETCH_LINE_CELLS];
};

#endif
