// scripts/tax-cost.sh, leg bpf-rawtp: loads and attaches every program of
// the object file given (default tax.bpf.o) and waits for SIGINT.
#include <bpf/libbpf.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static volatile int stop;
static void on_sig(int s) { (void)s; stop = 1; }
int main(int argc, char **argv)
{
	struct bpf_object *o = bpf_object__open_file(argc > 1 ? argv[1] : "tax.bpf.o", NULL);
	if (!o || bpf_object__load(o)) { fprintf(stderr, "load failed\n"); return 1; }
	struct bpf_program *p;
	bpf_object__for_each_program(p, o) {
		if (!bpf_program__attach(p)) { fprintf(stderr, "attach failed\n"); return 1; }
	}
	signal(SIGINT, on_sig); signal(SIGTERM, on_sig);
	while (!stop) pause();
	bpf_object__close(o);
	return 0;
}
