/* SPDX-License-Identifier: Apache-2.0
 *
 * The RoCEv2 invariant CRC (iCRC) of an IPv4 datagram, as a NIC that checks it
 * computes it (InfiniBand Architecture Specification vol. 1, ICRC; RoCEv2 annex A17):
 * CRC-32 (the Ethernet/zlib one) over 8 bytes of ones standing for the LRH, then
 * the packet from the IPv4 header to the end of the payload, with the fields a
 * router may change masked to ones (IPv4 TOS, TTL and header checksum; the UDP
 * checksum; the BTH's reserved byte 4, FECN/BECN included). It travels after the
 * payload least significant byte first.
 *
 * Plain C and zlib, no DPDK, so tests/unit/test_roce_icrc.py calls it through ctypes
 * against a packet built independently.
 */
#ifndef RAIN_ROCE_ICRC_H
#define RAIN_ROCE_ICRC_H

#include <stddef.h>
#include <stdint.h>

/* The iCRC of the datagram at `ip` (its IPv4 header), `len` bytes from the IP header
 * to the end of the 4-byte iCRC trailer (excluded from the CRC). 0 and *out set, or
 * -1 when `len` cannot hold the IPv4, UDP and BTH headers and the trailer. */
int rw_roce_icrc(const uint8_t *ip, size_t len, uint32_t *out);

/* 1 if the trailer holds the iCRC of the datagram, 0 if not, -1 as above. */
int rw_roce_icrc_ok(const uint8_t *ip, size_t len);

#endif /* RAIN_ROCE_ICRC_H */
