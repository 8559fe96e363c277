/* Writes the C API's self-test report (pkv_selftest_run_report and its accessors) as JSON in
 * the layout of `phasekv selftest --json` (docs/selftest.schema.json), so that
 * tests/cli/test_selftest_capi.py can compare the two field for field on the same run. Plain C
 * on purpose: it is what a C integrator writes.
 *
 *   selftest_report_json MODEL.pkv OUT.json [--ctx N] [--samples N] [--period P] [--seed S]
 *       [--records N] [--threads N] [--template FILE | --chat] [--control]
 *       [--gate-min-acc A] [--gate-max-gap G] [--guard auto|SHIFT] [--guard-threshold T] [--cancel-after N]
 *
 * Exit 0: written; 2: an error (printed); 4: cancelled as asked (--cancel-after N stops the
 * run from the progress callback after N probes; PKV_ERR_CANCELLED is then required). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phasekv.h"

static FILE* out;

static void str(const char* s) {
  fputc('"', out);
  for (; s && *s; ++s) {
    const unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
    else if (c == '\n') fputs("\\n", out);
    else if (c < 0x20) fprintf(out, "\\u%04x", c);
    else fputc(c, out);
  }
  fputc('"', out);
}

static void num(double v) {
  if (isfinite(v)) fprintf(out, "%.17g", v);
  else fputs("null", out); /* as nlohmann::json writes NaN and infinities */
}

static void key(const char* k) {
  str(k);
  fputc(':', out);
}

static void ints(const int32_t* v, uint32_t n) {
  fputc('[', out);
  for (uint32_t i = 0; i < n; ++i) fprintf(out, "%s%d", i ? "," : "", v[i]);
  fputc(']', out);
}

static void doubles(const double* v, uint32_t n) {
  fputc('[', out);
  for (uint32_t i = 0; i < n; ++i) {
    if (i) fputc(',', out);
    num(v[i]);
  }
  fputc(']', out);
}

/* One side of the guard's comparison, as the tool's guard_side_json. */
static void guard_side(const pkv_selftest_guard_side* g, uint32_t period) {
  fputs("{\"accuracy\":", out);
  doubles(g->accuracy, period);
  fputs(",\"ci\":[", out);
  for (uint32_t r = 0; r < period; ++r) {
    fputs(r ? ",[" : "[", out);
    num(g->ci_lo[r]);
    fputc(',', out);
    num(g->ci_hi[r]);
    fputc(']', out);
  }
  fputs("],\"mean_accuracy\":", out);
  num(g->mean_accuracy);
  fputs(",\"mean_ci\":[", out);
  num(g->mean_ci_lo);
  fputc(',', out);
  num(g->mean_ci_hi);
  fputs("],\"min_accuracy\":", out);
  num(g->min_accuracy);
  fprintf(out, ",\"argmin\":%d,\"gap\":", g->argmin);
  num(g->gap);
  fputc('}', out);
}

static int fail(pkv_status s, const char* what) {
  fprintf(stderr, "%s failed: %s: %s\n", what, pkv_status_string(s), pkv_last_error());
  return 2;
}

static int memories(const pkv_selftest_report* r, int32_t control) {
  fputc('[', out);
  for (uint32_t i = 0;; ++i) {
    const char* m = pkv_selftest_report_memory(r, control, i);
    if (!m) break;
    if (i) fputc(',', out);
    str(m);
  }
  fputc(']', out);
  return 0;
}

static int protocols(const pkv_selftest_report* r, int32_t control, int32_t n_protocols, uint32_t period) {
  fputc('{', out);
  for (int32_t i = 0; i < n_protocols; ++i) {
    pkv_selftest_protocol p;
    pkv_status s = pkv_selftest_report_protocol(r, control, i, &p);
    if (s != PKV_OK) return fail(s, "pkv_selftest_report_protocol");
    if (i) fputc(',', out);
    key(p.name);
    fputc('{', out);
    key("clusters");
    fprintf(out, "%d,", p.clusters);
    key("probes");
    fprintf(out, "%lld,", (long long)p.probes);
    key("residues");
    fputc('[', out);
    for (uint32_t q = 0; q < period; ++q) {
      pkv_selftest_residue row;
      if ((s = pkv_selftest_report_residue(r, control, i, q, &row)) != PKV_OK)
        return fail(s, "pkv_selftest_report_residue");
      fprintf(out, "%s{\"r\":%d,\"n\":%d,\"hits\":%d,\"accuracy\":", q ? "," : "", row.r, row.n, row.hits);
      num(row.accuracy);
      fputs(",\"ci\":[", out);
      num(row.ci_lo);
      fputc(',', out);
      num(row.ci_hi);
      fputs("],\"nll\":", out);
      num(row.nll);
      fputs(",\"probability\":", out);
      num(row.probability);
      fputs(",\"nll_excess\":", out);
      num(row.nll_excess);
      fputs(",\"loo_z\":", out);
      num(row.loo_z);
      fputs(",\"loo_p\":", out);
      num(row.loo_p);
      fputs(",\"holm_p\":", out);
      num(row.holm_p);
      fprintf(out, ",\"flagged\":%s}", row.flagged ? "true" : "false");
    }
    fputs("],", out);
    key("summary");
    fputs("{\"mean_accuracy\":", out);
    num(p.mean_accuracy);
    fputs(",\"mean_ci\":[", out);
    num(p.mean_ci_lo);
    fputc(',', out);
    num(p.mean_ci_hi);
    fputs("],\"min_accuracy\":", out);
    num(p.min_accuracy);
    fprintf(out, ",\"argmin\":%d,\"min_accuracy_split\":", p.argmin);
    num(p.min_accuracy_split);
    fputs(",\"deficit\":", out);
    num(p.deficit);
    fputs(",\"deficit_split\":", out);
    num(p.deficit_split);
    fputs(",\"gap\":", out);
    num(p.gap);
    fputs(",\"gap_null\":", out);
    num(p.gap_null);
    fputs(",\"sd\":", out);
    num(p.sd);
    fputs(",\"gap_rel\":", out);
    num(p.gap_rel);
    fputs(",\"cochran_p\":", out);
    num(p.cochran_p);
    fputs(",\"mde\":", out);
    num(p.mde);
    fputs(",\"mde_empirical\":", out);
    num(p.mde_empirical);
    fputs(",\"icc\":", out);
    num(p.icc);
    fputs("},", out);
    key("period_scan");
    fprintf(out, "{\"detected\":%s,\"period\":%d,\"p\":", p.period_detected ? "true" : "false", p.detected_period);
    num(p.period_p);
    fputs(",\"candidates\":[", out);
    for (uint32_t k = 0; k < p.n_period_candidates; ++k) {
      pkv_selftest_period_candidate c;
      if ((s = pkv_selftest_report_period_candidate(r, control, i, k, &c)) != PKV_OK)
        return fail(s, "pkv_selftest_report_period_candidate");
      fprintf(out, "%s{\"period\":%d,\"power\":", k ? "," : "", c.period);
      num(c.power);
      fputs(",\"p\":", out);
      num(c.p);
      fputc('}', out);
    }
    fputs("]},", out);
    key("flagged");
    ints(p.flagged, p.n_flagged);
    fputc('}', out);
  }
  fputc('}', out);
  return 0;
}

static long long g_cancel_after = -1;
static long long g_calls = 0;
static int on_progress(const pkv_selftest_progress* p, void* user) {
  (void)user;
  ++g_calls;
  if (p->done < 1 || p->done > p->total) return 1; /* an impossible count: stop */
  return g_cancel_after >= 0 && g_calls >= g_cancel_after;
}

static char* read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* b = (char*)malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  if (b) b[n] = '\0';
  fclose(f);
  return b;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.pkv OUT.json [options]\n", argv[0]);
    return 2;
  }
  pkv_selftest_params sp = pkv_selftest_default_params();
  char* tpl = NULL;
  for (int i = 3; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--control")) sp.control = 1;
    else if (!strcmp(a, "--chat")) sp.chat = 1;
    else if (v && !strcmp(a, "--ctx")) sp.probe_tokens = (uint32_t)atoi(v), ++i;
    else if (v && !strcmp(a, "--samples")) sp.samples = atoi(v), ++i;
    else if (v && !strcmp(a, "--period")) sp.period = atoi(v), ++i;
    else if (v && !strcmp(a, "--seed")) sp.seed = (uint64_t)strtoull(v, NULL, 10), ++i;
    else if (v && !strcmp(a, "--records")) sp.records = (uint32_t)atoi(v), ++i;
    else if (v && !strcmp(a, "--targets")) sp.targets = (uint32_t)atoi(v), ++i;
    else if (v && !strcmp(a, "--threads")) sp.n_threads = atoi(v), ++i;
    else if (v && !strcmp(a, "--gate-min-acc")) sp.gate_min_acc = atof(v), ++i;
    else if (v && !strcmp(a, "--gate-max-gap")) sp.gate_max_gap = atof(v), ++i;
    else if (v && !strcmp(a, "--cancel-after")) g_cancel_after = atoll(v), ++i;
    else if (v && !strcmp(a, "--guard")) sp.guard = strcmp(v, "auto") ? atoi(v) : 0, ++i;
    else if (v && !strcmp(a, "--guard-threshold")) sp.guard_threshold = atof(v), ++i;
    else if (v && !strcmp(a, "--template")) {
      if (!(tpl = read_file(v))) {
        fprintf(stderr, "cannot read %s\n", v);
        return 2;
      }
      sp.template_text = tpl;
      ++i;
    } else {
      fprintf(stderr, "unknown argument %s\n", a);
      return 2;
    }
  }
  sp.progress = on_progress;

  pkv_model* model = NULL;
  pkv_status s = pkv_model_load(argv[1], &model);
  if (s != PKV_OK) return fail(s, "pkv_model_load");
  pkv_selftest_report* r = NULL;
  s = pkv_selftest_run_report(model, &sp, &r);
  if (g_cancel_after >= 0) {
    if (s != PKV_ERR_CANCELLED || r != NULL || g_calls != g_cancel_after) {
      fprintf(stderr, "expected PKV_ERR_CANCELLED after %lld probes, got %s after %lld (%s)\n", g_cancel_after,
              pkv_status_string(s), g_calls, pkv_last_error());
      return 1;
    }
    printf("cancelled: %s\n", pkv_last_error());
    pkv_model_free(model);
    free(tpl);
    return 4;
  }
  if (s != PKV_OK) return fail(s, "pkv_selftest_run_report");

  pkv_selftest_overview o;
  if ((s = pkv_selftest_report_overview(r, &o)) != PKV_OK) return fail(s, "pkv_selftest_report_overview");
  if (g_calls != o.probes) {
    fprintf(stderr, "the progress callback ran %lld times for %lld probes\n", g_calls, (long long)o.probes);
    return 1;
  }
  out = fopen(argv[2], "w");
  if (!out) {
    fprintf(stderr, "cannot write %s\n", argv[2]);
    return 2;
  }
  fputc('{', out);
  key("model");
  fprintf(out, "{\"n_layers\":%u,\"memories\":", o.n_layers);
  memories(r, 0);
  fputs(",\"strides\":[", out);
  for (uint32_t i = 0; i < o.n_strides; ++i) fprintf(out, "%s%u", i ? "," : "", o.strides[i]);
  fprintf(out, "],\"max_local\":%u},", o.max_local);
  fprintf(out, "\"period\":%u,\"period_source\":", o.period);
  str(o.period_source);
  fprintf(out, ",\"template\":{\"t0\":%u,\"phase\":%u,\"prefix_tokens\":%u,\"suffix_tokens\":%u,\"map\":[", o.t0,
          o.phase, o.prefix_tokens, o.suffix_tokens);
  for (uint32_t k = 0; k < o.period; ++k) {
    pkv_selftest_map_entry m;
    if ((s = pkv_selftest_report_map(r, k, &m)) != PKV_OK) return fail(s, "pkv_selftest_report_map");
    fprintf(out, "%s{\"offset\":%u,\"residue\":%u,\"weak\":%s,\"accuracy\":", k ? "," : "", m.offset, m.residue,
            m.weak ? "true" : "false");
    num(m.accuracy);
    fputc('}', out);
  }
  fprintf(out, "],\"advice\":{\"strongest_residue\":%u,\"change_needed\":%s,\"pad_tokens_before_slot\":%u,\"text\":[",
          o.strongest_residue, o.change_needed ? "true" : "false", o.pad_tokens_before_slot);
  for (uint32_t i = 0; i < o.n_advice; ++i) {
    if (i) fputc(',', out);
    str(pkv_selftest_report_advice(r, i));
  }
  fputs("]}},", out);
  key("protocols");
  if (protocols(r, 0, o.n_protocols, o.period)) return 2;
  fputc(',', out);
  key("flagged");
  ints(o.flagged, o.n_flagged);
  fputc(',', out);
  key("probe_digest");
  str(o.probe_digest);
  fputc(',', out);
  key("control");
  if (o.has_control) {
    fputs("{\"memories\":", out);
    memories(r, 1);
    fputs(",\"protocols\":", out);
    if (protocols(r, 1, o.n_protocols, o.period)) return 2;
    fputs(",\"flagged\":", out);
    ints(o.control_flagged, o.n_control_flagged);
    fputs(",\"probe_digest\":", out);
    str(o.control_probe_digest);
    fputs(",\"compression_gap\":", out);
    num(o.compression_gap);
    fputc('}', out);
  } else {
    fputs("null", out);
  }
  fprintf(out, ",\"gates\":{\"pass\":%s,\"checks\":[", o.pass ? "true" : "false");
  for (uint32_t i = 0; i < o.n_gate_checks; ++i) {
    pkv_selftest_gate_check c;
    if ((s = pkv_selftest_report_gate_check(r, i, &c)) != PKV_OK) return fail(s, "pkv_selftest_report_gate_check");
    fprintf(out, "%s{\"name\":", i ? "," : "");
    str(c.name);
    fputs(",\"threshold\":", out);
    num(c.threshold);
    fputs(",\"value\":", out);
    num(c.value);
    fprintf(out, ",\"pass\":%s}", c.pass ? "true" : "false");
  }
  fputs("]}", out);
  {
    pkv_selftest_guard g;
    if ((s = pkv_selftest_report_guard(r, &g)) != PKV_OK) return fail(s, "pkv_selftest_report_guard");
    if (g.requested) {
      fprintf(out, ",\"guard\":{\"shift\":%u,\"auto\":%s,\"stage1_weak\":", g.shift, g.auto_shift ? "true" : "false");
      ints(g.stage1_weak, g.n_stage1_weak);
      fputs(",\"threshold\":", out);
      num(g.threshold);
      fprintf(out, ",\"clusters\":%d,\"triggered\":", g.clusters);
      num(g.triggered);
      fputs(",\"from_b\":", out);
      num(g.from_b);
      fprintf(out, ",\"worst_residue\":%d,\"worst_gain\":", g.worst_residue);
      num(g.worst_gain);
      fputs(",\"worst_gain_ci\":[", out);
      num(g.worst_gain_lo);
      fputc(',', out);
      num(g.worst_gain_hi);
      fputs("],\"mean_gain\":", out);
      num(g.mean_gain);
      fputs(",\"mean_gain_ci\":[", out);
      num(g.mean_gain_lo);
      fputc(',', out);
      num(g.mean_gain_hi);
      fputc(']', out);
      fputs(",\"unguarded\":", out);
      if (g.clusters >= 2) guard_side(&g.unguarded, o.period);
      else fputs("null", out);
      fputs(",\"guarded\":", out);
      if (g.clusters >= 2) guard_side(&g.guarded, o.period);
      else fputs("null", out);
      fputc('}', out);
    }
  }
  fprintf(out, ",\"timings\":{\"prefill_tokens\":%lld,\"naive_prefill_tokens\":%lld,\"probes\":%lld}",
          (long long)o.prefill_tokens, (long long)o.naive_prefill_tokens, (long long)o.probes);
  /* Accessors refuse what is out of range, naming the index. */
  {
    pkv_selftest_residue row;
    if (pkv_selftest_report_residue(r, 0, 0, o.period, &row) != PKV_ERR_INVALID_ARGUMENT ||
        !strstr(pkv_last_error(), "residue = ")) {
      fprintf(stderr, "an out-of-range residue was not refused\n");
      return 1;
    }
    pkv_selftest_protocol p;
    if (!o.has_control && pkv_selftest_report_protocol(r, 1, 0, &p) != PKV_ERR_INVALID_ARGUMENT) {
      fprintf(stderr, "the control of a report without one was not refused\n");
      return 1;
    }
  }
  fputs("}\n", out);
  if (fclose(out) != 0) return 2;
  pkv_selftest_report_free(r);
  pkv_model_free(model);
  free(tpl);
  return 0;
}
