/* A release gate from plain C: run the phase self-test through the deployed template, print
 * the weak residues and the advice, and fail (exit 3) when a gate fails, as
 * `phasekv selftest --gate-min-acc A --gate-max-gap G` does.
 *
 *   example_selftest_gate MODEL.pkv [TEMPLATE_FILE|-] [MIN_ACC] [MAX_GAP] [SAMPLES] [CTX]
 *
 * TEMPLATE_FILE holds the prompt template with one {{content}} slot ("-": the model's chat
 * template). MIN_ACC / MAX_GAP < 0 leave that gate out. Exit 0: the gates pass; 3: a gate
 * failed; 2: an error; 130: interrupted (Ctrl-C, through the progress callback). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phasekv.h"

static volatile sig_atomic_t g_stop = 0;
static void on_sigint(int sig) {
  (void)sig;
  g_stop = 1;
}

/* Progress on stderr every 10 %; nonzero cancels the run. */
static int on_progress(const pkv_selftest_progress* p, void* user) {
  int* last = (int*)user;
  const int tenth = (int)(p->done * 10 / (p->total > 0 ? p->total : 1));
  if (tenth != *last) {
    *last = tenth;
    fprintf(stderr, "  %s %s: %lld/%lld probes, ETA %.0f s\n", p->control ? "control" : "model", p->phase,
            (long long)p->done, (long long)p->total, p->eta_s);
  }
  return g_stop;
}

static char* read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  char* text = NULL;
  size_t n = 0, cap = 0;
  int c;
  while ((c = fgetc(f)) != EOF) {
    if (n + 2 > cap) {
      cap = cap ? 2 * cap : 4096;
      char* grown = (char*)realloc(text, cap);
      if (!grown) break;
      text = grown;
    }
    text[n++] = (char)c;
  }
  fclose(f);
  if (text) text[n] = '\0';
  return text;
}

static int report(pkv_status s, const char* what) {
  fprintf(stderr, "%s failed: %s: %s\n", what, pkv_status_string(s), pkv_last_error());
  return s == PKV_ERR_CANCELLED ? 130 : 2;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.pkv [TEMPLATE_FILE|-] [MIN_ACC] [MAX_GAP] [SAMPLES] [CTX]\n", argv[0]);
    return 2;
  }
  pkv_model* model = NULL;
  pkv_status s = pkv_model_load(argv[1], &model);
  if (s != PKV_OK) return report(s, "pkv_model_load");

  pkv_selftest_params p = pkv_selftest_default_params();
  char* tpl = NULL;
  if (argc > 2 && strcmp(argv[2], "-") == 0) {
    p.chat = 1;
  } else if (argc > 2) {
    if (!(tpl = read_file(argv[2]))) {
      fprintf(stderr, "cannot read the template %s\n", argv[2]);
      return 2;
    }
    p.template_text = tpl;
  }
  p.gate_min_acc = argc > 3 ? atof(argv[3]) : 0.5;
  p.gate_max_gap = argc > 4 ? atof(argv[4]) : 0.3;
  if (argc > 5) p.samples = atoi(argv[5]);
  if (argc > 6) p.probe_tokens = (uint32_t)atoi(argv[6]);
  p.control = 1; /* how much of the gap compression itself adds */
  int last = -1;
  p.progress = on_progress;
  p.progress_user_data = &last;
  signal(SIGINT, on_sigint);

  pkv_selftest_report* r = NULL;
  if ((s = pkv_selftest_run_report(model, &p, &r)) != PKV_OK) return report(s, "pkv_selftest_run_report");
  pkv_selftest_overview o;
  if ((s = pkv_selftest_report_overview(r, &o)) != PKV_OK) return report(s, "pkv_selftest_report_overview");

  printf("period %u (%s); slot at token %u, phase %u\n", o.period, o.period_source, o.t0, o.phase);
  for (int32_t i = 0; i < o.n_protocols; ++i) {
    pkv_selftest_protocol pr;
    if ((s = pkv_selftest_report_protocol(r, 0, i, &pr)) != PKV_OK) return report(s, "pkv_selftest_report_protocol");
    printf("%-12s mean %.3f [%.3f, %.3f]  min %.3f at r=%d  gap %.3f (noise ~%.3f)  MDE %.3f\n", pr.name,
           pr.mean_accuracy, pr.mean_ci_lo, pr.mean_ci_hi, pr.min_accuracy, pr.argmin, pr.gap, pr.gap_null, pr.mde);
  }
  printf("weak residues:");
  if (o.n_flagged == 0) printf(" none");
  for (uint32_t i = 0; i < o.n_flagged; ++i) printf(" %d", o.flagged[i]);
  printf("\n");
  for (uint32_t i = 0; i < o.n_advice; ++i) printf("  %s\n", pkv_selftest_report_advice(r, i));
  if (o.has_control) printf("compression costs %.3f of mean accuracy\n", o.compression_gap);
  for (uint32_t i = 0; i < o.n_gate_checks; ++i) {
    pkv_selftest_gate_check c;
    if ((s = pkv_selftest_report_gate_check(r, i, &c)) != PKV_OK) return report(s, "pkv_selftest_report_gate_check");
    printf("gate %s: %s (value %.3f, threshold %.3f)\n", c.name, c.pass ? "pass" : "FAIL", c.value, c.threshold);
  }
  const int pass = o.pass;
  pkv_selftest_report_free(r);
  pkv_model_free(model);
  free(tpl);
  return pass ? 0 : 3;
}
