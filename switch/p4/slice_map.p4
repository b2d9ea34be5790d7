/* SliceMap: a task's type decides its slice (paper 3.2.3). The controller keeps
 * the table; unmapped types go to slice 0. */
#ifndef _SLICE_MAP_P4_
#define _SLICE_MAP_P4_

control SliceMap(in headers_t hdr, inout ingress_md_t ig_md) {
    action set_slice(slice_t slice) {
        ig_md.slice = slice;
    }
    table map_slice {
        key = { hdr.rain.task_type : exact; }
        actions = { set_slice; }
        default_action = set_slice(0);
        size = TASK_TYPES;
    }
    apply {
        map_slice.apply();
    }
}

#endif
