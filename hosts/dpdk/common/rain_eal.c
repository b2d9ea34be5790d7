/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>

#include "rain_eal.h"

void rain_eal_cleanup(void)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", rte_eal_get_runtime_dir()); /* gone after the cleanup */
	rte_eal_cleanup();
	DIR *d = opendir(dir);
	if (d == NULL)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	rmdir(dir);
}
