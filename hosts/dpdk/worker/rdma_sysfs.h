/* SPDX-License-Identifier: Apache-2.0
 *
 * What sysfs says about RDMA devices, for the ibverbs variant: which one sits on the
 * DPDK port's PCI function, its kernel interface (for error messages) and its hardware
 * counters (the NIC's iCRC drops). Plain C
 * without DPDK or ibverbs, so tests call it on a fake sysfs tree (tests/unit/
 * test_rdma_sysfs.py); `sysfs` is the root ("/sys" on a host).
 */
#ifndef RAIN_RDMA_SYSFS_H
#define RAIN_RDMA_SYSFS_H

#include <stddef.h>
#include <stdint.h>

/* The PCI address ("0000:3b:00.0") of RDMA device `ibdev`: the last component of the
 * real path of <sysfs>/class/infiniband/<ibdev>/device. 0, or -1 with errno set. */
int rw_sysfs_rdma_pci(const char *sysfs, const char *ibdev, char *pci, size_t n);

/* The index in names[0..n) of the RDMA device on PCI function `pci`, or -1. */
int rw_sysfs_match_pci(const char *sysfs, const char *const *names, int n, const char *pci);

/* The first network interface of `ibdev`'s PCI function (<...>/device/net/<if>), or
 * -1 with errno set. */
int rw_sysfs_netdev(const char *sysfs, const char *ibdev, char *ifname, size_t n);

/* Hardware counter `name` of port `port` of `ibdev` (<sysfs>/class/infiniband/<ibdev>/
 * ports/<port>/hw_counters/<name>): 0 and *out set, or -1 with errno set (ENOENT: the
 * driver or firmware does not expose it). */
int rw_sysfs_hw_counter(const char *sysfs, const char *ibdev, unsigned port, const char *name, uint64_t *out);

#endif /* RAIN_RDMA_SYSFS_H */
