/**
 * Cell badges: each `%%checkpoint` cell shows what its last run did (restored,
 * executed, incomplete, failed), the time taken or saved and the checkpoint's short
 * id, or what a Plan Run All says it would do. The badge lives in the cell's DOM
 * only, below the cell, and is never written to the notebook file.
 */

import { INotebookTracker, Notebook, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

import { formatDuration } from './format';
import { BadgeInfo, TimelineModel, checkpointCellId } from './model';

const BADGE_CLASS = 'ipr-cell-badge';

type Cell = Notebook['widgets'][number];

/** The text, tooltip and kind of a badge. */
export function describeBadge(info: BadgeInfo): { text: string; title: string; kind: string } {
  const hint = 'Click to show it in the checkpoint timeline.';
  if (info.kind === 'error') {
    return {
      text: 'failed: the cell raised an error',
      title: 'Nothing was stored; the cell executes again next time.',
      kind: 'failed'
    };
  }
  if (info.kind === 'plan') {
    const p = info.planned;
    if (p.verdict === 'restore') {
      const from = p.short_id ? ` from ${p.short_id}` : '';
      return {
        text: `would restore · saves ${formatDuration(p.saves)}`,
        title: `Plan Run All: ${p.cell_id} would restore${from}.`,
        kind: 'plan-restore'
      };
    }
    if (p.verdict === 'execute') {
      return {
        text: `would execute: ${p.reason}`,
        title: `Plan Run All: ${p.reason}`,
        kind: 'plan-execute'
      };
    }
    return {
      text: `${p.verdict}: ${p.reason}`,
      title: `Plan Run All: ${p.reason}`,
      kind: 'plan-unknown'
    };
  }
  const o = info.outcome;
  const id = o.short_id ? ` · ${o.short_id}` : '';
  const reason = o.reason ? `${o.reason.replace(/^'[^']*' executes: /, 'Executed: ')}\n` : '';
  switch (o.outcome) {
    case 'restored':
      return {
        text: `restored · saved ${formatDuration(o.saved)}${id}`,
        title: `Restored in ${formatDuration(o.duration)} instead of executing.\n${hint}`,
        kind: 'restored'
      };
    case 'executed':
      return {
        text: `executed · ${formatDuration(o.duration)}${id}`,
        title: `${reason}Checkpoint saved.\n${hint}`,
        kind: 'executed'
      };
    case 'incomplete':
      return {
        text: `incomplete · ${formatDuration(o.duration)}${id}`,
        title: `${reason}Could not store ${o.detail}; the cell executes again next time.\n${hint}`,
        kind: 'incomplete'
      };
    case 'failed':
      return {
        text: `failed · ${formatDuration(o.duration)}`,
        title: `${reason}The checkpoint was not saved: ${o.detail}\n${hint}`,
        kind: 'failed'
      };
    case 'fast':
      return {
        text: `executed · ${formatDuration(o.duration)} (not stored: quick)`,
        title: 'Ran faster than the auto checkpoint threshold; nothing stored.',
        kind: 'executed'
      };
    default:
      return {
        text: `not checkpointed: ${o.reason || o.outcome}`,
        title: `${o.reason || o.detail}\n${hint}`,
        kind: 'uncached'
      };
  }
}

/** Draws the badges of every tracked notebook from the model's outcomes and plans. */
export class CellBadges {
  constructor(
    private readonly tracker: INotebookTracker,
    private readonly model: TimelineModel,
    private readonly showPanel: () => void
  ) {
    model.badgesChanged.connect((_, panel) => this.render(panel));
    NotebookActions.executionScheduled.connect((_, { notebook, cell }) => {
      // A new run: the previous badge (or the plan's) no longer says what happened.
      const panel = this.panelOf(notebook);
      if (panel) {
        model.setBadge(panel, cell.model.id, null);
      }
    });
    NotebookActions.executed.connect((_, { notebook, cell, success }) => {
      const panel = this.panelOf(notebook);
      if (!panel) {
        return;
      }
      const source = cell.model.sharedModel.getSource();
      if (!success && checkpointCellId(source) && !model.badgesOf(panel).has(cell.model.id)) {
        model.setBadge(panel, cell.model.id, { kind: 'error', cellId: cell.model.id });
      } else {
        this.render(panel);
      }
    });
  }

  render(panel: NotebookPanel): void {
    const map = this.model.badgesOf(panel);
    for (const cell of panel.content.widgets) {
      this.renderCell(cell, map.get(cell.model.id) ?? null);
    }
  }

  private renderCell(cell: Cell, info: BadgeInfo | null): void {
    let node = cell.node.querySelector<HTMLElement>(`:scope > .${BADGE_CLASS}`);
    if (!info) {
      node?.remove();
      return;
    }
    if (!node) {
      node = document.createElement('div');
      node.className = BADGE_CLASS;
      node.setAttribute('role', 'button');
      node.tabIndex = 0;
      node.addEventListener('click', () => this.onClick(cell));
      cell.node.appendChild(node);
    }
    const { text, title, kind } = describeBadge(info);
    node.textContent = text;
    node.title = title;
    node.dataset.outcome = kind;
    node.classList.toggle(`${BADGE_CLASS}-pending`, info.kind === 'plan');
  }

  private onClick(cell: Cell): void {
    const panel = this.tracker.find(p => p.content.widgets.includes(cell));
    const info = panel ? this.model.badgesOf(panel).get(cell.model.id) : undefined;
    this.showPanel();
    if (info?.kind === 'outcome') {
      this.model.selectOutcome(info.outcome);
    }
  }

  private panelOf(notebook: Notebook): NotebookPanel | null {
    return this.tracker.find(p => p.content === notebook) ?? null;
  }
}
