/**
 * The panel's model: follows one notebook's kernel and keeps its timeline.
 *
 * State machine, driven by the session's signals:
 *   no notebook / no kernel          → no-kernel
 *   kernel appears or restarts        → connecting (disk snapshot shown meanwhile)
 *   comm opened, hello received       → live, busy while the kernel runs a cell
 *   comm closed at once               → not-loaded; retried after each execution,
 *                                       never in a loop
 *   kernel restarting / dead / gone   → offline: the last timeline stays, read from disk
 *
 * Selection, details and restore are the controller's (controller.ts), the same one
 * the widget uses; this model gives it a transport that asks the kernel when it
 * answers and the server (the store on disk) when it does not.
 */

import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { KernelChannel, executionState, fetchSnapshot, flagExecutions, serverRequest } from './client';
import { SnapshotMeta, TimelineController } from './controller';
import { ChangedMessage } from './protocol';
import { ITimelineModel } from './tokens';
import { CellOutcome, PlannedCell, PlanState, Status, TimelineEvent, ViewState } from './types';

/** What one cell's badge shows: a run's outcome, or a plan's verdict (pending). */
export type BadgeInfo =
  | { kind: 'outcome'; outcome: CellOutcome }
  | { kind: 'plan'; planned: PlannedCell }
  | { kind: 'error'; cellId: string };

// 'starting' is all a page sees when another client restarts the kernel.
const OFFLINE_STATUSES = new Set<string>([
  'starting',
  'restarting',
  'autorestarting',
  'dead',
  'terminating',
  'unknown'
]);

const STATUS_TEXT: Record<Status, string> = {
  'no-kernel': 'No notebook kernel: open a notebook to see its checkpoints.',
  'not-loaded': 'ipy_resume is not loaded in this kernel. Run:',
  connecting: 'Connecting to the kernel…',
  live: 'Live: following the kernel.',
  busy: 'Kernel busy: the timeline updates as checkpoints finish.',
  offline: 'Kernel restarting or dead: showing the store on disk (read-only).'
};

/** Matches the first line `%%checkpoint CELL_ID ...` of a cell. */
export function checkpointCellId(source: string): string | null {
  const match = /^\s*%%checkpoint[ \t]+([^\s]+)/.exec(source);
  return match ? match[1] : null;
}

export class TimelineModel implements ITimelineModel {
  private _stateChanged = new Signal<ITimelineModel, ViewState>(this);
  private panel: NotebookPanel | null = null;
  private kernel: Kernel.IKernelConnection | null = null;
  private channel: KernelChannel | null = null;
  private status: Status = 'no-kernel';
  private readonly timeline = new TimelineController({
    request: content => this.request(content),
    changed: () => this.emit(),
    canRestore: () => Boolean(this.channel?.isOpen),
    isBusy: () => this.status === 'busy',
    restored: () => this.refresh()
  });
  private loaded = false;
  private executing = false;
  private generation = 0;
  private plan: PlanState = { state: 'none' };
  private badges = new WeakMap<NotebookPanel, Map<string, BadgeInfo>>();
  private _badgesChanged = new Signal<this, NotebookPanel>(this);

  /** Fires with the notebook whose cell badges changed. */
  get badgesChanged(): ISignal<this, NotebookPanel> {
    return this._badgesChanged;
  }

  get planState(): PlanState {
    return this.plan;
  }

  get notebook(): NotebookPanel | null {
    return this.panel;
  }

  /** The badges of `panel`'s cells, by notebook cell id. Never saved in the notebook. */
  badgesOf(panel: NotebookPanel): Map<string, BadgeInfo> {
    let map = this.badges.get(panel);
    if (!map) {
      map = new Map();
      this.badges.set(panel, map);
    }
    return map;
  }

  setBadge(panel: NotebookPanel, cellId: string, info: BadgeInfo | null): void {
    const map = this.badgesOf(panel);
    if (info) {
      map.set(cellId, info);
    } else if (!map.delete(cellId)) {
      return;
    }
    this._badgesChanged.emit(panel);
  }

  /** Ask the kernel what Run All would do; marks each planned cell with a pending badge. */
  async planRunAll(): Promise<void> {
    const panel = this.panel;
    const channel = this.channel;
    if (!panel || !channel?.isOpen || !this.loaded) {
      this.plan = { state: 'error', error: 'A plan needs a live kernel with ipy_resume loaded.' };
      this.emit();
      return;
    }
    this.plan = { state: 'planning' };
    this.emit();
    const cells = panel.content.widgets
      .filter(cell => cell.model.type === 'code')
      .map(cell => ({ source: cell.model.sharedModel.getSource(), id: cell.model.id }));
    try {
      const plan = await channel.api.plan(cells);
      if (panel !== this.panel) {
        return;
      }
      this.plan = { state: 'ready', plan };
      const map = this.badgesOf(panel);
      for (const planned of plan.cells) {
        if (planned.cell && planned.cell_id !== null) {
          map.set(planned.cell, { kind: 'plan', planned });
        }
      }
      this._badgesChanged.emit(panel);
    } catch (err) {
      this.plan = { state: 'error', error: (err as Error).message };
    }
    this.emit();
  }

  clearPlan(): void {
    const panel = this.panel;
    this.plan = { state: 'none' };
    if (panel) {
      const map = this.badgesOf(panel);
      for (const [id, info] of [...map]) {
        if (info.kind === 'plan') {
          map.delete(id);
        }
      }
      this._badgesChanged.emit(panel);
    }
    this.emit();
  }

  /** Select the newest timeline row of a badge's checkpoint (or CELL_ID). */
  selectOutcome(outcome: CellOutcome): boolean {
    const events = this.timeline.snapshot?.events ?? [];
    for (let i = events.length - 1; i >= 0; i--) {
      const e = events[i];
      if (outcome.checkpoint_id ? e.checkpoint_id === outcome.checkpoint_id : e.cell_id === outcome.cell_id) {
        this.select(e.seq);
        return true;
      }
    }
    return false;
  }

  get stateChanged(): ISignal<ITimelineModel, ViewState> {
    return this._stateChanged;
  }

  get state(): ViewState {
    return this.timeline.state({
      status: this.status,
      statusText: STATUS_TEXT[this.status],
      canRestore: this.loaded && (this.status === 'live' || this.status === 'busy'),
      canGoToCell: this.panel !== null
    });
  }

  /** Follow `panel` (or nothing). Called whenever the current notebook changes. */
  setNotebook(panel: NotebookPanel | null): void {
    if (panel === this.panel) {
      return;
    }
    if (this.panel) {
      const ctx = this.panel.sessionContext;
      ctx.kernelChanged.disconnect(this.onKernelChanged, this);
      ctx.statusChanged.disconnect(this.onStatusChanged, this);
      this.panel.disposed.disconnect(this.onPanelDisposed, this);
    }
    this.panel = panel;
    this.plan = { state: 'none' };
    this.timeline.reset();
    if (panel) {
      const ctx = panel.sessionContext;
      ctx.kernelChanged.connect(this.onKernelChanged, this);
      ctx.statusChanged.connect(this.onStatusChanged, this);
      panel.disposed.connect(this.onPanelDisposed, this);
      void ctx.ready.then(() => {
        if (this.panel === panel) {
          this.attach(ctx.session?.kernel ?? null);
        }
      });
    }
    this.attach(panel?.sessionContext.session?.kernel ?? null);
  }

  select(seq: number | null): void {
    this.timeline.select(seq);
  }

  restore(event: TimelineEvent): Promise<void> {
    return this.timeline.restore(event);
  }

  async goToCell(event: TimelineEvent): Promise<boolean> {
    const panel = this.panel;
    if (!panel) {
      return false;
    }
    const notebook = panel.content;
    const cells = notebook.widgets;
    for (let i = 0; i < cells.length; i++) {
      if (checkpointCellId(cells[i].model.sharedModel.getSource()) === event.cell_id) {
        notebook.activeCellIndex = i;
        await notebook.scrollToCell(cells[i], 'center');
        return true;
      }
    }
    this.timeline.setNotice({ kind: 'error', text: `No cell in this notebook starts with %%checkpoint ${event.cell_id}.` });
    return false;
  }

  /** Reload everything: from the kernel when it answers, else from disk. */
  async refresh(): Promise<void> {
    if (this.channel?.isOpen && this.loaded) {
      try {
        this.timeline.setSnapshot(await this.channel.api.snapshot());
        return;
      } catch (err) {
        this.timeline.setNotice({ kind: 'error', text: (err as Error).message });
      }
    } else if (this.kernel && !this.loaded && this.status === 'not-loaded') {
      await this.connect(this.kernel);
      return;
    }
    await this.loadFromDisk();
  }

  dispose(): void {
    this.setNotebook(null);
    Signal.clearData(this);
  }

  private onPanelDisposed(): void {
    this.setNotebook(null);
  }

  private onKernelChanged(): void {
    this.attach(this.panel?.sessionContext.session?.kernel ?? null);
  }

  private onStatusChanged(_: unknown, status: Kernel.Status): void {
    if (!this.kernel) {
      return;
    }
    if (OFFLINE_STATUSES.has(status)) {
      if (this.status !== 'offline') {
        this.dropChannel();
        this.setStatus('offline');
        void this.loadFromDisk();
      }
    } else if (status === 'idle' && this.status === 'offline') {
      // The kernel is back after a restart: its extension state is new, ask once.
      void this.connect(this.kernel);
    }
  }

  /** Busy/idle of *executions* only (see `executionState`). */
  private onIopub(kernel: Kernel.IKernelConnection, msg: KernelMessage.IIOPubMessage): void {
    const state = kernel === this.kernel ? executionState(msg) : null;
    if (state === null) {
      return;
    }
    this.executing = state === 'busy';
    if (state === 'busy' && this.status === 'live') {
      this.setStatus('busy');
    } else if (state === 'idle') {
      if (this.status === 'busy') {
        this.setStatus('live');
        // Pushes cover live changes; this picks up anything a push missed.
        void this.catchUp();
      } else if (this.status === 'not-loaded') {
        // The cell that just ran may have been `%load_ext ipy_resume`.
        void this.connect(kernel);
      }
    }
  }

  private attach(kernel: Kernel.IKernelConnection | null): void {
    if (kernel === this.kernel && (kernel === null || this.channel || this.status !== 'no-kernel')) {
      return;
    }
    this.dropChannel();
    this.kernel?.iopubMessage.disconnect(this.onIopub, this);
    this.kernel = kernel;
    this.executing = false;
    kernel?.iopubMessage.connect(this.onIopub, this);
    if (kernel) {
      flagExecutions(kernel);
    }
    if (!kernel) {
      this.setStatus('no-kernel');
      if (this.panel) {
        void this.loadFromDisk();
      }
      return;
    }
    void this.connect(kernel);
  }

  private async connect(kernel: Kernel.IKernelConnection): Promise<void> {
    this.dropChannel();
    const generation = this.generation;
    this.setStatus('connecting');
    // Show what is on disk straight away; the kernel may be busy for hours.
    void this.loadFromDisk();
    const channel = new KernelChannel(kernel);
    this.channel = channel;
    let result: 'loaded' | 'not-loaded';
    try {
      result = await channel.open();
    } catch {
      result = 'not-loaded';
    }
    if (generation !== this.generation) {
      channel.dispose();
      return;
    }
    if (result === 'not-loaded') {
      channel.dispose();
      this.channel = null;
      this.loaded = false;
      this.setStatus(OFFLINE_STATUSES.has(kernel.status) ? 'offline' : 'not-loaded');
      return;
    }
    this.loaded = true;
    channel.changed.connect(this.onChanged, this);
    const panel = this.panel;
    channel.outcome.connect((_, outcome) => this.onOutcome(panel, outcome));
    // Badges from now on: the kernel stops writing status lines and pushes outcomes,
    // and answers with those of cells that ran before the channel opened.
    channel.api.badges(true).then(
      answer => answer.outcomes.forEach(outcome => this.onOutcome(panel, outcome)),
      () => undefined
    );
    channel.closed.connect(() => {
      if (generation === this.generation) {
        this.loaded = false;
        this.channel = null;
        this.setStatus(OFFLINE_STATUSES.has(kernel.status) ? 'offline' : 'not-loaded');
      }
    });
    // Not kernel.status: our own comm traffic makes the kernel look busy too.
    this.setStatus(this.executing ? 'busy' : 'live');
    try {
      this.timeline.setSnapshot(await channel.api.snapshot());
    } catch (err) {
      this.timeline.setNotice({ kind: 'error', text: (err as Error).message });
    }
  }

  private dropChannel(): void {
    this.generation++;
    this.channel?.dispose();
    this.channel = null;
    this.loaded = false;
  }

  private async loadFromDisk(): Promise<void> {
    const panel = this.panel;
    if (!panel) {
      return;
    }
    const generation = this.generation;
    try {
      const snapshot = await fetchSnapshot(panel.context.path);
      // A kernel answer that arrived meanwhile is fresher than the disk.
      if (panel === this.panel && (generation === this.generation || !this.loaded)) {
        if (!this.loaded || !this.timeline.snapshot) {
          this.timeline.setSnapshot(snapshot);
        }
      }
    } catch (err) {
      if (panel === this.panel && !this.timeline.snapshot) {
        this.timeline.setNotice({ kind: 'error', text: (err as Error).message });
      }
    }
  }

  private async catchUp(): Promise<void> {
    const channel = this.channel;
    if (!channel?.isOpen) {
      return;
    }
    try {
      const after = this.timeline.snapshot?.last_seq ?? null;
      const delta = await channel.api.snapshot(after);
      this.merge(delta.events, delta);
    } catch {
      // The next push or refresh brings it; a failed catch-up is not news.
    }
  }

  private onOutcome(panel: NotebookPanel | null, outcome: CellOutcome): void {
    if (panel && outcome.cell) {
      this.setBadge(panel, outcome.cell, { kind: 'outcome', outcome });
    }
  }

  private onChanged(_: KernelChannel, msg: ChangedMessage): void {
    this.merge(msg.events, msg);
  }

  private merge(events: TimelineEvent[], meta: SnapshotMeta): void {
    if (!this.timeline.merge(events, meta)) {
      void this.refresh();
    }
  }

  private setStatus(status: Status): void {
    this.status = status;
    this.emit();
  }

  /**
   * The controller's transport: the kernel when it answers. Details come from disk
   * unless the kernel is live and idle: a busy kernel answers only after its cell ends.
   */
  private request(content: Record<string, unknown>): Promise<unknown> {
    const channel = this.channel;
    if (channel?.isOpen && (content.request !== 'details' || (this.loaded && this.status === 'live'))) {
      return channel.request(content);
    }
    return serverRequest(this.panel?.context.path ?? '', content);
  }

  private emit(): void {
    this._stateChanged.emit(this.state);
  }
}
