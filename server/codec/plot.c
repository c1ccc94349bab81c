/* plot.c: srv_codec_png_plot -- curves against an axis as a picture a
 * person can read: a title, both axes titled, round ticks with grid lines
 * (linear, or powers of ten on a log axis), one colour per series from a
 * palette that stays apart for most colour-blind readers (Okabe and Ito),
 * a legend beside the plot, and dashed reference lines with their own
 * labels (a trained length, a threshold).  Series longer than the plot is
 * wide are drawn a pixel column at a time (the range each column covers,
 * joined to the next), so a curve of a million points costs what a curve
 * of a thousand does and no spike disappears. */
#include "codec-internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLOT_W 960
#define PLOT_H 540
#define MARGIN 16
#define TICK_LEN 6
#define MAX_TICKS 9
#define LABEL_MAX 28  /* characters of a legend or mark label */
#define TITLE_MAX 76  /* characters of the title */
#define SWATCH 28     /* legend line sample, pixels */
#define LINE_W 2.0
#define PAD 0.04      /* of the data range, on each side */
#define MAX_MARKS 4   /* reference lines drawn, at most */

struct mark_label {
  int x, y;
  char text[LABEL_MAX + 1];
};

/* Okabe and Ito's palette (2008), black last (it is the ink's colour). */
static const unsigned char g_palette[][3] = {
    {0, 114, 178},  {230, 159, 0},  {0, 158, 115}, {213, 94, 0},
    {204, 121, 167}, {86, 180, 233}, {240, 228, 66}, {0, 0, 0}};
#define NPALETTE ((int)(sizeof g_palette / sizeof g_palette[0]))
static const unsigned char g_grid[3] = {228, 228, 228};
static const unsigned char g_mark[3] = {110, 110, 110};

/* ======================================================================
 * axes
 * ====================================================================== */

struct axis {
  int log;
  double lo, hi;    /* data range, transformed (log10 on a log axis) */
  int p0, p1;       /* pixel of lo and of hi */
  double tick[MAX_TICKS];
  int nticks;
};

static double tf(const struct axis *a, double v)
{
  return a->log ? log10(v) : v;
}

/* Whether v can be drawn on the axis. */
static int usable(const struct axis *a, double v)
{
  return isfinite(v) && (!a->log || v > 0);
}

static double to_px(const struct axis *a, double v)
{
  return a->p0 + (tf(a, v) - a->lo) / (a->hi - a->lo) * (a->p1 - a->p0);
}

static void widen(struct axis *a, double v)
{
  double t;

  if (!usable(a, v))
    return;
  t = tf(a, v);
  if (t < a->lo)
    a->lo = t;
  if (t > a->hi)
    a->hi = t;
}

/* Padding, and a range for data that has none. */
static void settle(struct axis *a)
{
  double span;

  if (a->lo > a->hi) { /* nothing drawable */
    a->lo = a->log ? 0 : 0;
    a->hi = a->log ? 1 : 1;
  }
  if (a->hi - a->lo < 1e-12 * fmax(1.0, fabs(a->hi))) {
    double d = a->log ? 0.5 : fmax(0.5, fabs(a->hi) * 0.1);
    a->lo -= d;
    a->hi += d;
  }
  span = a->hi - a->lo;
  a->lo -= PAD * span;
  a->hi += PAD * span;
}

/* Ticks at round values: multiples of 1, 2, 2.5 or 5 x 10^k on a linear
 * axis; on a log axis the powers of ten (every second or more when there
 * are many), and 2 and 5 x 10^k when the range spans less than two. */
static void make_ticks(struct axis *a)
{
  a->nticks = 0;
  if (!a->log) {
    static const double mult[] = {1, 2, 2.5, 5, 10};
    double raw = (a->hi - a->lo) / 6, p = pow(10, floor(log10(raw))), step = p;
    double v;
    size_t m;
    for (m = 0; m < sizeof mult / sizeof mult[0]; m++)
      if (mult[m] * p >= raw) {
        step = mult[m] * p;
        break;
      }
    for (v = ceil(a->lo / step) * step; v <= a->hi && a->nticks < MAX_TICKS;
         v += step)
      a->tick[a->nticks++] = fabs(v) < step * 1e-9 ? 0 : v;
    return;
  }
  {
    double e0 = ceil(a->lo), e1 = floor(a->hi), e;
    int every = (int)ceil((e1 - e0 + 1) / (MAX_TICKS - 1));
    if (every < 1)
      every = 1;
    for (e = e0; e <= e1 && a->nticks < MAX_TICKS; e += every)
      a->tick[a->nticks++] = e;
    if (e1 - e0 < 2) {
      static const double sub[] = {0.30103, 0.69897}; /* log10 2, log10 5 */
      for (e = floor(a->lo); e <= a->hi; e++) {
        size_t s;
        for (s = 0; s < 2; s++)
          if (e + sub[s] >= a->lo && e + sub[s] <= a->hi &&
              a->nticks < MAX_TICKS)
            a->tick[a->nticks++] = e + sub[s];
      }
    }
  }
}

/* A number in few characters: 0.25, 1500, 131072, 1e6, 2.5e-5. */
static void fmt_num(double v, char *buf, size_t cap)
{
  char *e;

  if (fabs(v) < 1e-300)
    v = 0;
  snprintf(buf, cap, fabs(v) >= 1e6 || (v != 0 && fabs(v) < 1e-3) ? "%.3g"
                                                                  : "%.6g",
           v);
  /* "1e+06" -> "1e6", "2.5e-05" -> "2.5e-5" */
  if ((e = strchr(buf, 'e')) != NULL) {
    char *d = e + 1, *s = d;
    if (*s == '+')
      s++;
    if (*s == '-')
      *d++ = *s++;
    while (*s == '0' && s[1])
      s++;
    memmove(d, s, strlen(s) + 1);
  }
}

/* The label of a tick: the value itself (a power of ten on a log axis). */
static void tick_label(const struct axis *a, double t, char *buf, size_t cap)
{
  fmt_num(a->log ? pow(10, t) : t, buf, cap);
  if (a->log && strchr(buf, 'e') == NULL && strlen(buf) > 5)
    snprintf(buf, cap, "1e%.0f", t); /* 100000 reads better as 1e5 */
}

/* ======================================================================
 * series
 * ====================================================================== */

struct frame {
  struct srv_image *im;
  const struct axis *x, *y;
};

static double px_x(const struct frame *f, const struct srv_plot_series *s,
                   int64_t i)
{
  return to_px(f->x, s->x ? s->x[i] : (double)i);
}

static int point_ok(const struct frame *f, const struct srv_plot_series *s,
                    int64_t i)
{
  return usable(f->x, s->x ? s->x[i] : (double)i) && usable(f->y, s->y[i]);
}

/* A segment, dashed (6 on, 4 off, counted from *phase along the path) or
 * not. */
static void segment(const struct frame *f, double x0, double y0, double x1,
                    double y1, double w, const unsigned char *rgb,
                    double *phase)
{
  double len = hypot(x1 - x0, y1 - y0), t = 0;

  if (!phase) {
    srv_codec__line(f->im, x0, y0, x1, y1, w, rgb);
    return;
  }
  while (t < len) {
    double pos = fmod(*phase + t, 10.0), run = pos < 6 ? 6 - pos : 10 - pos;
    double t1 = fmin(len, t + run);
    if (pos < 6)
      srv_codec__line(f->im, x0 + (x1 - x0) * t / len,
                      y0 + (y1 - y0) * t / len, x0 + (x1 - x0) * t1 / len,
                      y0 + (y1 - y0) * t1 / len, w, rgb);
    t = t1;
  }
  *phase += len;
}

/* Few points: every segment (steps: across, then up or down), dashes and
 * markers as asked. */
static void draw_exact(const struct frame *f, const struct srv_plot_series *s,
                       const unsigned char *rgb)
{
  double phase = 0, *ph = s->style == SRV_PLOT_DASHED ? &phase : NULL;
  double w = s->style == SRV_PLOT_MARKERS ? 1.0 : LINE_W, px = 0, py = 0;
  int have = 0;
  int64_t i;

  for (i = 0; i < s->n; i++) {
    double x, y;
    if (!point_ok(f, s, i)) {
      have = 0;
      continue;
    }
    x = px_x(f, s, i);
    y = to_px(f->y, s->y[i]);
    if (have && s->style == SRV_PLOT_STEPS) {
      segment(f, px, py, x, py, w, rgb, ph);
      segment(f, x, py, x, y, w, rgb, ph);
    } else if (have) {
      segment(f, px, py, x, y, w, rgb, ph);
    }
    if (s->style == SRV_PLOT_MARKERS)
      srv_codec__line(f->im, x, y, x, y, 7.0, rgb);
    px = x;
    py = y;
    have = 1;
  }
}

/* Many points: per pixel column, the span of the values that fall in it,
 * joined to the neighbouring columns. */
static void draw_columns(const struct frame *f,
                         const struct srv_plot_series *s,
                         const unsigned char *rgb)
{
  double cx = 0, lx = 0, ly = 0, lo = 0, hi = 0;
  int have = 0;
  int64_t i;

  for (i = 0; i <= s->n; i++) {
    double x = 0, y = 0;
    int ok = i < s->n && point_ok(f, s, i);
    if (ok) {
      x = px_x(f, s, i);
      y = to_px(f->y, s->y[i]);
      if (have && floor(x) == cx) {
        lo = fmin(lo, y);
        hi = fmax(hi, y);
        lx = x;
        ly = y;
        continue;
      }
    }
    if (have) { /* the column just closed */
      if (hi - lo > 0.5)
        srv_codec__line(f->im, cx + 0.5, lo, cx + 0.5, hi, LINE_W, rgb);
      if (ok)
        srv_codec__line(f->im, lx, ly, x, y, LINE_W, rgb);
    }
    have = ok;
    if (ok) {
      cx = floor(x);
      lo = hi = ly = y;
      lx = x;
    }
  }
}

/* ======================================================================
 * the picture
 * ====================================================================== */

static void legend_text(const char *label, char *buf)
{
  srv_codec__printable(label ? label : "", buf, LABEL_MAX + 1);
}

int srv_codec_png_plot(const struct srv_plot *p, struct srv_buf *out,
                       struct srv_err *err)
{
  struct srv_image im;
  struct mark_label ml[MAX_MARKS];
  struct axis ax = {0}, ay = {0};
  struct frame f;
  char buf[64], ttl[TITLE_MAX + 1];
  int i, ylab_w = 0, legend_w = 0, shown, left, top, right, bottom, rc, y;
  int64_t k;

  if (!p || p->nseries < 1 || !p->series)
    return srv_fail(err, 400, NULL, "a plot needs at least one series");
  ax.log = p->xlog;
  ay.log = p->ylog;
  ax.lo = ay.lo = INFINITY;
  ax.hi = ay.hi = -INFINITY;
  for (i = 0; i < p->nseries; i++) {
    const struct srv_plot_series *s = &p->series[i];
    for (k = 0; k < s->n; k++)
      if (usable(&ax, s->x ? s->x[k] : (double)k) && usable(&ay, s->y[k])) {
        widen(&ax, s->x ? s->x[k] : (double)k);
        widen(&ay, s->y[k]);
      }
  }
  for (i = 0; i < p->nmarks; i++)
    widen(p->marks[i].vertical ? &ax : &ay, p->marks[i].at);
  settle(&ax);
  settle(&ay);
  make_ticks(&ax);
  make_ticks(&ay);

  /* Layout: the y title and tick labels left, the legend right, the x
   * tick labels and title below. */
  for (i = 0; i < ay.nticks; i++) {
    tick_label(&ay, ay.tick[i], buf, sizeof buf);
    if (srv_codec__text_w(buf) > ylab_w)
      ylab_w = srv_codec__text_w(buf);
  }
  for (i = 0; i < p->nseries; i++) {
    char lb[LABEL_MAX + 1];
    legend_text(p->series[i].label, lb);
    if (srv_codec__text_w(lb) > legend_w)
      legend_w = srv_codec__text_w(lb);
  }
  legend_w += SWATCH + 8 + 2 * MARGIN;
  left = MARGIN + SRV_GLYPH_H + 10 + ylab_w + TICK_LEN + 4;
  top = MARGIN + SRV_GLYPH_H + MARGIN;
  right = PLOT_W - legend_w;
  bottom = PLOT_H - MARGIN - SRV_GLYPH_H - 10 - SRV_GLYPH_H - TICK_LEN - 4;
  ax.p0 = left;
  ax.p1 = right;
  ay.p0 = bottom;
  ay.p1 = top;

  if (srv_codec__image_init(&im, PLOT_W, PLOT_H) != 0)
    return srv_fail(err, 500, NULL, "out of memory drawing the plot");
  f.im = &im;
  f.x = &ax;
  f.y = &ay;
  srv_codec__printable(p->title, ttl, sizeof ttl);
  srv_codec__text(&im, MARGIN, MARGIN, ttl, 0);

  /* Grid and tick labels. */
  for (i = 0; i < ax.nticks; i++) {
    int x = (int)lround(ax.p0 + (ax.tick[i] - ax.lo) / (ax.hi - ax.lo) *
                                    (ax.p1 - ax.p0));
    srv_codec__fill_rect(&im, x, top, 1, bottom - top, g_grid);
    srv_codec__fill_rect(&im, x, bottom, 1, TICK_LEN, srv_codec__ink);
    tick_label(&ax, ax.tick[i], buf, sizeof buf);
    srv_codec__text(&im, x - srv_codec__text_w(buf) / 2,
                    bottom + TICK_LEN + 4, buf, 0);
  }
  for (i = 0; i < ay.nticks; i++) {
    int yy = (int)lround(ay.p0 + (ay.tick[i] - ay.lo) / (ay.hi - ay.lo) *
                                     (ay.p1 - ay.p0));
    srv_codec__fill_rect(&im, left, yy, right - left, 1, g_grid);
    srv_codec__fill_rect(&im, left - TICK_LEN, yy, TICK_LEN, 1,
                         srv_codec__ink);
    tick_label(&ay, ay.tick[i], buf, sizeof buf);
    srv_codec__text(&im, left - TICK_LEN - 4 - srv_codec__text_w(buf),
                    yy - SRV_GLYPH_H / 2, buf, 0);
  }
  /* Axis titles. */
  srv_codec__printable(p->xlabel, buf, 60);
  srv_codec__text(&im, (left + right - srv_codec__text_w(buf)) / 2,
                  PLOT_H - MARGIN - SRV_GLYPH_H, buf, 0);
  srv_codec__printable(p->ylabel, buf, 40);
  srv_codec__text(&im, MARGIN, (top + bottom + srv_codec__text_w(buf)) / 2,
                  buf, 1);

  /* Reference lines under the data, labelled inside the plot. */
  memset(ml, 0, sizeof ml);
  for (i = 0; i < p->nmarks && i < MAX_MARKS; i++) {
    const struct srv_plot_mark *m = &p->marks[i];
    double phase = 0;
    char *lb = ml[i].text;
    if (!usable(m->vertical ? &ax : &ay, m->at))
      continue;
    srv_codec__printable(m->label, lb, LABEL_MAX + 1);
    if (m->vertical) {
      double x = to_px(&ax, m->at);
      int lx = (int)x + 6;
      segment(&f, x, top, x, bottom, 1.5, g_mark, &phase);
      if (lx + srv_codec__text_w(lb) > right)
        lx = (int)x - 6 - srv_codec__text_w(lb);
      ml[i].x = lx;
      ml[i].y = top + 6 + i * (SRV_GLYPH_H + 6);
    } else {
      double yy = to_px(&ay, m->at);
      segment(&f, left, yy, right, yy, 1.5, g_mark, &phase);
      ml[i].x = left + 6;
      ml[i].y = (int)yy - SRV_GLYPH_H - 4;
    }
  }

  /* The series, in order: the last drawn on top. */
  for (i = 0; i < p->nseries; i++) {
    const struct srv_plot_series *s = &p->series[i];
    const unsigned char *rgb = g_palette[i % NPALETTE];
    if (s->n > 2 * (int64_t)(right - left) && s->style != SRV_PLOT_MARKERS)
      draw_columns(&f, s, rgb);
    else
      draw_exact(&f, s, rgb);
  }

  /* The marks' labels over everything, on a patch of paper. */
  for (i = 0; i < p->nmarks && i < MAX_MARKS; i++)
    if (ml[i].text[0]) {
      srv_codec__fill_rect(&im, ml[i].x - 3, ml[i].y - 3,
                           srv_codec__text_w(ml[i].text) + 6,
                           SRV_GLYPH_H + 6, srv_codec__paper);
      srv_codec__text(&im, ml[i].x, ml[i].y, ml[i].text, 0);
    }

  /* Frame, and the legend (as many entries as fit, then "+N more"). */
  srv_codec__fill_rect(&im, left, top, right - left + 1, 1, srv_codec__ink);
  srv_codec__fill_rect(&im, left, bottom, right - left + 1, 1, srv_codec__ink);
  srv_codec__fill_rect(&im, left, top, 1, bottom - top, srv_codec__ink);
  srv_codec__fill_rect(&im, right, top, 1, bottom - top, srv_codec__ink);
  shown = (bottom - top) / (SRV_GLYPH_H + 8);
  if (shown < p->nseries)
    shown--;
  for (i = 0, y = top; i < p->nseries && i < shown; i++) {
    const struct srv_plot_series *s = &p->series[i];
    const unsigned char *rgb = g_palette[i % NPALETTE];
    double phase = 0, cy = y + SRV_GLYPH_H / 2.0;
    char lb[LABEL_MAX + 1];
    legend_text(s->label, lb);
    if (s->style == SRV_PLOT_MARKERS)
      srv_codec__line(&im, right + MARGIN + SWATCH / 2.0, cy,
                      right + MARGIN + SWATCH / 2.0, cy, 7.0, rgb);
    segment(&f, right + MARGIN, cy, right + MARGIN + SWATCH, cy,
            s->style == SRV_PLOT_MARKERS ? 1.0 : LINE_W, rgb,
            s->style == SRV_PLOT_DASHED ? &phase : NULL);
    srv_codec__text(&im, right + MARGIN + SWATCH + 8, y, lb, 0);
    y += SRV_GLYPH_H + 8;
  }
  if (i < p->nseries) {
    snprintf(buf, sizeof buf, "+%d more", p->nseries - i);
    srv_codec__text(&im, right + MARGIN + SWATCH + 8, y, buf, 0);
  }

  rc = srv_codec__png_write(&im, ttl, out, "plot", err);
  free(im.px);
  return rc;
}
