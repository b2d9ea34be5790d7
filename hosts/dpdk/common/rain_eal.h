/* SPDX-License-Identifier: Apache-2.0
 *
 * The end of the EAL's lifetime, shared by the DPDK programs.
 */
#ifndef RAIN_EAL_H
#define RAIN_EAL_H

/* rte_eal_cleanup(), then remove the runtime folder the EAL made for this process
 * (/var/run/dpdk/<file-prefix>/ as root: about 1 MB of config and fbarray files),
 * which rte_eal_cleanup() leaves behind. Each program runs as a primary process
 * with its own --file-prefix, so the folder is ours alone; without this every
 * sweep point would add one. A process killed before it gets here leaves it:
 * the agents remove it then (hosts/agent/common.py, runtime_dir). */
void rain_eal_cleanup(void);

#endif
