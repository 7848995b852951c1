/**
 * The time strip: a canvas with a run lane and a restore lane on one time axis,
 * a mark per event (area by bytes written, colour by outcome), a tooltip on hover
 * and a legend. Clicking a mark picks its event.
 */

import { SnapshotIndex, el, outcomeColour, outcomeDot } from './dom';
import { formatBytes, formatClock, formatDay, formatDuration } from './format';
import { TimelineEvent, ViewState } from './types';

const STRIP_HEIGHT = 72;
// Gaps longer than this between two events are drawn as a break, so days
// between sessions do not squeeze every mark into one corner.
const GAP_CAP_S = 120;
const PAD_LEFT = 48;
const PAD_RIGHT = 14;
const LANE_RUN = 18;
const LANE_RESTORE = 42;
const AXIS_Y = 54;

export interface Mark {
  x: number;
  y: number;
  r: number;
  event: TimelineEvent;
}

function isRestoreLane(outcome: string): boolean {
  return outcome === 'restored' || outcome === 'resumed';
}

/**
 * Positions on the strip: time runs left to right, with long idle gaps capped
 * so that each session gets room; radius grows with the square root of bytes
 * so a mark's area tracks what was written.
 */
export function layoutMarks(events: TimelineEvent[], width: number): Mark[] {
  if (!events.length) {
    return [];
  }
  const offsets: number[] = new Array(events.length);
  let total = 0;
  offsets[0] = 0;
  for (let i = 1; i < events.length; i++) {
    const delta = Math.max(0, events[i].started - events[i - 1].started);
    total += Math.min(delta, GAP_CAP_S);
    offsets[i] = total;
  }
  let maxBytes = 0;
  for (const e of events) {
    maxBytes = Math.max(maxBytes, e.bytes || 0);
  }
  const span = width - PAD_LEFT - PAD_RIGHT;
  // Dense timelines get smaller marks, so thousands of events stay a readable texture.
  const perMark = span / events.length;
  const minR = perMark < 2 ? 1.5 : 3;
  const growR = Math.max(1, Math.min(7, perMark * 1.5));
  const marks: Mark[] = [];
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    const x = total > 0 ? PAD_LEFT + (offsets[i] / total) * span : PAD_LEFT + span / 2;
    const r = minR + (maxBytes > 0 ? growR * Math.sqrt((e.bytes || 0) / maxBytes) : 0);
    marks.push({ x, y: isRestoreLane(e.outcome) ? LANE_RESTORE : LANE_RUN, r, event: e });
  }
  // Equal timestamps keep seq order, so the array stays sorted by x.
  return marks;
}

function legend(): HTMLDivElement {
  const node = el('div', 'ipr-legend');
  for (const outcome of ['executed', 'restored', 'resumed', 'incomplete', 'failed']) {
    const item = el('span', 'ipr-legend-item');
    item.append(outcomeDot(outcome), document.createTextNode(outcome));
    node.append(item);
  }
  node.append(el('span', 'ipr-legend-item', 'size = bytes written'));
  return node;
}

/**
 * The strip; redraws on the next animation frame after each `update` or resize.
 *
 * ```ts
 * const strip = new TimeStrip(seq => select(seq));
 * parent.append(strip.node);
 * strip.update(state, new SnapshotIndex(state.snapshot));
 * ```
 */
export class TimeStrip {
  readonly node: HTMLDivElement;
  private readonly canvas: HTMLCanvasElement;
  private readonly tooltip: HTMLDivElement;
  private readonly pick: (seq: number) => void;
  private state: ViewState | null = null;
  private index = new SnapshotIndex(null);
  private marks: Mark[] = [];
  private resizeObserver: ResizeObserver | null = null;
  private frame = 0;

  constructor(pick: (seq: number) => void) {
    this.pick = pick;
    this.node = el('div', 'ipr-strip');
    this.canvas = el('canvas', 'ipr-canvas');
    this.canvas.height = STRIP_HEIGHT;
    this.tooltip = el('div', 'ipr-tooltip');
    this.tooltip.style.display = 'none';
    this.node.append(this.canvas, this.tooltip, legend());

    this.canvas.addEventListener('mousemove', ev => this.hover(ev));
    this.canvas.addEventListener('mouseleave', () => {
      this.tooltip.style.display = 'none';
    });
    this.canvas.addEventListener('click', ev => {
      const mark = this.markAt(ev);
      if (mark) {
        this.pick(mark.event.seq);
      }
    });
    if (typeof ResizeObserver !== 'undefined') {
      this.resizeObserver = new ResizeObserver(() => this.schedule());
      this.resizeObserver.observe(this.node);
    }
  }

  update(state: ViewState, index: SnapshotIndex): void {
    this.state = state;
    this.index = index;
    this.schedule();
  }

  dispose(): void {
    this.resizeObserver?.disconnect();
    cancelAnimationFrame(this.frame);
  }

  private schedule(): void {
    cancelAnimationFrame(this.frame);
    this.frame = requestAnimationFrame(() => this.draw());
  }

  private draw(): void {
    const canvas = this.canvas;
    const width = Math.max(120, this.node.clientWidth || 300);
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(STRIP_HEIGHT * ratio);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${STRIP_HEIGHT}px`;
    const ctx = canvas.getContext('2d');
    if (!ctx) {
      return;
    }
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, STRIP_HEIGHT);
    const events = this.state?.snapshot?.events ?? [];
    this.marks = layoutMarks(events, width);
    canvas.dataset.marks = String(this.marks.length);
    const style = getComputedStyle(this.node);
    const fg = style.getPropertyValue('--jp-ui-font-color2').trim() || '#666';
    const line = style.getPropertyValue('--jp-border-color2').trim() || '#ddd';

    // Lanes: runs above, restores below, on one shared time axis.
    ctx.strokeStyle = line;
    ctx.lineWidth = 1;
    for (const y of [LANE_RUN, LANE_RESTORE]) {
      ctx.beginPath();
      ctx.moveTo(PAD_LEFT, y);
      ctx.lineTo(width - PAD_RIGHT, y);
      ctx.stroke();
    }
    ctx.fillStyle = fg;
    ctx.font = '10px sans-serif';
    ctx.textBaseline = 'middle';
    ctx.fillText('run', 4, LANE_RUN);
    ctx.fillText('restore', 4, LANE_RESTORE);
    if (!events.length) {
      ctx.fillText('no events yet', PAD_LEFT + 8, (LANE_RUN + LANE_RESTORE) / 2);
      return;
    }
    this.drawAxis(ctx, width, fg);
    this.drawMarks(ctx);
  }

  /** Breaks where time was compressed, and clock labels spread along the axis. */
  private drawAxis(ctx: CanvasRenderingContext2D, width: number, fg: string): void {
    const marks = this.marks;
    ctx.textBaseline = 'alphabetic';
    let lastLabelX = -Infinity;
    for (let i = 0; i < marks.length; i++) {
      const mark = marks[i];
      const prev = i > 0 ? marks[i - 1].event : null;
      const isBreak = prev !== null && mark.event.started - prev.started > GAP_CAP_S;
      if (isBreak) {
        const bx = (marks[i - 1].x + mark.x) / 2;
        ctx.strokeStyle = fg;
        ctx.beginPath();
        ctx.moveTo(bx - 2, AXIS_Y - 4);
        ctx.lineTo(bx + 1, AXIS_Y + 4);
        ctx.moveTo(bx + 1, AXIS_Y - 4);
        ctx.lineTo(bx + 4, AXIS_Y + 4);
        ctx.stroke();
      }
      if (mark.x - lastLabelX > 70 && mark.x < width - 40) {
        ctx.fillStyle = fg;
        const started = mark.event.started;
        const clock = formatClock(started).slice(0, 5);
        ctx.fillText(isBreak || i === 0 ? `${formatDay(started).slice(5)} ${clock}` : clock, mark.x, AXIS_Y + 10);
        lastLabelX = mark.x;
      }
    }
    const lastMark = marks[marks.length - 1];
    if (marks.length > 1 && width - PAD_RIGHT - lastLabelX > 110) {
      ctx.fillStyle = fg;
      ctx.textAlign = 'right';
      ctx.fillText(formatClock(lastMark.event.started).slice(0, 5), width - PAD_RIGHT, AXIS_Y + 10);
      ctx.textAlign = 'left';
    }
  }

  private drawMarks(ctx: CanvasRenderingContext2D): void {
    const selected = this.state?.selected ?? null;
    ctx.globalAlpha = this.marks.length > 2000 ? 0.5 : 0.8;
    for (const mark of this.marks) {
      ctx.fillStyle = outcomeColour(mark.event.outcome);
      ctx.beginPath();
      ctx.arc(mark.x, mark.y, mark.r, 0, Math.PI * 2);
      ctx.fill();
    }
    ctx.globalAlpha = 1;
    const chosen = selected === null ? undefined : this.marks.find(m => m.event.seq === selected);
    if (chosen) {
      ctx.strokeStyle = '#000';
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.arc(chosen.x, chosen.y, chosen.r + 3, 0, Math.PI * 2);
      ctx.stroke();
    }
  }

  private markAt(ev: MouseEvent): Mark | null {
    const rect = this.canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left;
    const y = ev.clientY - rect.top;
    // Marks are sorted by x: binary search, then look at the neighbours.
    let lo = 0;
    let hi = this.marks.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.marks[mid].x < x) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    let best: Mark | null = null;
    let bestDist = Infinity;
    for (let i = Math.max(0, lo - 30); i < Math.min(this.marks.length, lo + 30); i++) {
      const m = this.marks[i];
      const d = Math.hypot(m.x - x, m.y - y);
      if (d <= Math.max(m.r, 5) + 3 && d < bestDist) {
        best = m;
        bestDist = d;
      }
    }
    return best;
  }

  private hover(ev: MouseEvent): void {
    const mark = this.markAt(ev);
    if (!mark) {
      this.tooltip.style.display = 'none';
      this.canvas.style.cursor = 'default';
      return;
    }
    const e = mark.event;
    const saved = e.saved ? ` · saved ${formatDuration(e.saved)}` : '';
    this.canvas.style.cursor = 'pointer';
    this.tooltip.replaceChildren(
      el('b', undefined, e.cell_id),
      el('div', undefined, `${e.outcome} · ${formatDay(e.started)} ${formatClock(e.started)}`),
      el('div', undefined, `${e.outcome === 'restored' ? 'restore' : 'run'} ${formatDuration(e.duration)}${saved}`),
      el('div', undefined, `${formatBytes(e.bytes)} written · checkpoint ${this.index.shortId(e.checkpoint_id)}`)
    );
    this.tooltip.style.display = 'block';
    const left = Math.min(mark.x + 10, Math.max(0, this.node.clientWidth - 220));
    this.tooltip.style.left = `${left}px`;
    this.tooltip.style.top = `${mark.y + 10}px`;
  }
}
