/* SPDX-License-Identifier: Apache-2.0
 *
 * RDMA devices in sysfs (rdma_sysfs.h). A ConnectX PCI function has one RDMA device
 * (mlx5_N) and one netdev; /sys/class/infiniband/mlx5_N/device links to the function.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rdma_sysfs.h"

int rw_sysfs_rdma_pci(const char *sysfs, const char *ibdev, char *pci, size_t n)
{
	char path[PATH_MAX], real[PATH_MAX];

	if (strchr(ibdev, '/') != NULL || strcmp(ibdev, "..") == 0) {
		errno = EINVAL;
		return -1;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/class/infiniband/%s/device", sysfs, ibdev) >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (realpath(path, real) == NULL)
		return -1;
	const char *last = strrchr(real, '/');
	last = last ? last + 1 : real;
	if (strlen(last) + 1 > n) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(pci, last, strlen(last) + 1);
	return 0;
}

int rw_sysfs_match_pci(const char *sysfs, const char *const *names, int n, const char *pci)
{
	char got[64];

	for (int i = 0; i < n; i++)
		if (rw_sysfs_rdma_pci(sysfs, names[i], got, sizeof(got)) == 0 && strcasecmp(got, pci) == 0)
			return i;
	return -1;
}

int rw_sysfs_netdev(const char *sysfs, const char *ibdev, char *ifname, size_t n)
{
	char path[PATH_MAX];

	if (strchr(ibdev, '/') != NULL) {
		errno = EINVAL;
		return -1;
	}
	snprintf(path, sizeof(path), "%s/class/infiniband/%s/device/net", sysfs, ibdev);
	DIR *d = opendir(path);
	if (d == NULL)
		return -1;
	struct dirent *e;
	char best[256] = "";
	while ((e = readdir(d)) != NULL) /* the smallest name: stable if there are several */
		if (e->d_name[0] != '.' && (best[0] == '\0' || strcmp(e->d_name, best) < 0))
			snprintf(best, sizeof(best), "%s", e->d_name);
	closedir(d);
	if (best[0] == '\0') {
		errno = ENOENT;
		return -1;
	}
	if (strlen(best) + 1 > n) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(ifname, best, strlen(best) + 1);
	return 0;
}

int rw_sysfs_hw_counter(const char *sysfs, const char *ibdev, unsigned port, const char *name, uint64_t *out)
{
	char path[PATH_MAX], buf[32];

	if (strchr(ibdev, '/') != NULL || strchr(name, '/') != NULL || strcmp(ibdev, "..") == 0) {
		errno = EINVAL;
		return -1;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%u/hw_counters/%s", sysfs, ibdev, port,
			     name) >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	char *got = fgets(buf, sizeof(buf), f);
	fclose(f);
	char *end;
	errno = 0;
	unsigned long long v = got ? strtoull(buf, &end, 10) : 0;
	if (got == NULL || end == buf || (*end != '\n' && *end != '\0') || errno != 0) {
		errno = EINVAL;
		return -1;
	}
	*out = v;
	return 0;
}
