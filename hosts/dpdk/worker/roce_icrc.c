/* SPDX-License-Identifier: Apache-2.0
 *
 * The RoCEv2 iCRC (roce_icrc.h). Cost: zlib's crc32 over the whole datagram; the
 * headers are copied to mask their variant fields, the payload is read in place.
 */
#include <string.h>
#include <zlib.h>

#include "roce_icrc.h"

#define IPV4_MIN 20u
#define IPV4_MAX 60u
#define UDP_LEN  8u
#define BTH_LEN  12u
#define ICRC_LEN 4u

int rw_roce_icrc(const uint8_t *ip, size_t len, uint32_t *out)
{
	static const uint8_t lrh[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	uint8_t hdr[IPV4_MAX + UDP_LEN + BTH_LEN];

	if (len < IPV4_MIN)
		return -1;
	size_t ihl = (size_t)(ip[0] & 0x0f) * 4;
	size_t hl = ihl + UDP_LEN + BTH_LEN;
	if (ihl < IPV4_MIN || len < hl + ICRC_LEN)
		return -1;
	memcpy(hdr, ip, hl);
	hdr[1] = 0xff;                            /* TOS: DSCP and ECN */
	hdr[8] = 0xff;                            /* TTL */
	hdr[10] = hdr[11] = 0xff;                 /* header checksum */
	hdr[ihl + 6] = hdr[ihl + 7] = 0xff;       /* UDP checksum */
	hdr[ihl + UDP_LEN + 4] = 0xff;            /* BTH resv8a (FECN, BECN, reserved) */

	uLong c = crc32(0L, lrh, sizeof(lrh));
	c = crc32(c, hdr, (uInt)hl);
	c = crc32(c, ip + hl, (uInt)(len - hl - ICRC_LEN));
	*out = (uint32_t)c;
	return 0;
}

int rw_roce_icrc_ok(const uint8_t *ip, size_t len)
{
	uint32_t want;

	if (rw_roce_icrc(ip, len, &want) != 0)
		return -1;
	const uint8_t *t = ip + len - ICRC_LEN;
	uint32_t got = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
	return got == want;
}
