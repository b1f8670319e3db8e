// scripts/tax-cost.sh, leg bpf-rawtp: raw_tp programs on sched_switch and
// sched_waking, each a lookup of the thread in an (empty) hash map: what
// an eBPF observer keyed by thread does for every task on the machine.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} watched SEC(".maps");

// The current thread counted if it is watched: one lookup, as an
// observer keyed by thread pays for every task.
static __always_inline int count_current(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 *v = bpf_map_lookup_elem(&watched, &tid);
	if (v)
		__sync_fetch_and_add(v, 1);
	return 0;
}

SEC("raw_tp/sched_switch")
int on_switch(__u64 *ctx)
{
	// The args are (preempt, prev, next); prev is the current task.
	return count_current();
}

// (Current here is the waker; the woken task is ctx[0]. Against an empty
// map either costs the same one lookup.)
SEC("raw_tp/sched_waking")
int on_waking(__u64 *ctx)
{
	return count_current();
}

#ifdef SYSCALLS
// With -DSYSCALLS (leg bpf-rawtp-sys): every system call's entry and exit
// too, as call boundaries would need (this sets the syscall slow path on
// every task, as any syscall tracepoint does).
SEC("raw_tp/sys_enter")
int on_enter(__u64 *ctx)
{
	return count_current();
}

SEC("raw_tp/sys_exit")
int on_exit(__u64 *ctx)
{
	return count_current();
}
#endif

char LICENSE[] SEC("license") = "GPL";
