/**
 * The side panel: a Lumino widget that hosts the shared renderer and wires
 * its buttons to the model.
 */

import { Widget } from '@lumino/widgets';

import { TimelineRenderer } from './renderer';
import { ITimelineModel } from './tokens';
import { formatDuration } from './format';
import { PlanState, ViewState } from './types';

export class TimelinePanel extends Widget {
  private readonly model: ITimelineModel;
  private readonly renderer: TimelineRenderer;
  private readonly planNode: HTMLElement;
  private readonly planButton: HTMLButtonElement;
  private shownPlan: PlanState | null = null;

  constructor(model: ITimelineModel) {
    super();
    this.model = model;
    this.addClass('ipr-panel');
    const header = document.createElement('div');
    header.className = 'ipr-panel-header';
    header.textContent = 'Checkpoint timeline';
    this.node.append(header);
    // Plan Run All: what each %%checkpoint cell would do, nothing run or loaded.
    const bar = document.createElement('div');
    bar.className = 'ipr-plan-bar';
    this.planButton = document.createElement('button');
    this.planButton.className = 'ipr-plan-button jp-Button jp-mod-styled jp-mod-reject';
    this.planButton.textContent = 'Plan Run All';
    this.planButton.title =
      'Which %%checkpoint cells Run All would restore or execute, and why; nothing runs.';
    this.planButton.addEventListener('click', () => void model.planRunAll());
    bar.append(this.planButton);
    this.planNode = document.createElement('div');
    this.planNode.className = 'ipr-plan';
    this.node.append(bar, this.planNode);
    this.renderer = new TimelineRenderer(this.node, {
      select: seq => model.select(seq),
      restore: event => void model.restore(event),
      goToCell: event => void model.goToCell(event),
      refresh: () => void model.refresh()
    });
    model.stateChanged.connect(this.onState, this);
    this.renderer.update(model.state);
  }

  dispose(): void {
    this.model.stateChanged.disconnect(this.onState, this);
    this.renderer.dispose();
    super.dispose();
  }

  protected onAfterShow(): void {
    this.renderer.update(this.model.state);
  }

  private onState(_: ITimelineModel, state: ViewState): void {
    if (this.isVisible) {
      this.renderer.update(state);
    }
    this.renderPlan(this.model.planState);
  }

  private renderPlan(plan: PlanState): void {
    if (plan === this.shownPlan) {
      return;
    }
    this.shownPlan = plan;
    this.planButton.disabled = plan.state === 'planning';
    const node = this.planNode;
    node.replaceChildren();
    node.dataset.state = plan.state;
    if (plan.state === 'none') {
      return;
    }
    if (plan.state === 'planning') {
      node.textContent = 'Planning…';
      return;
    }
    if (plan.state === 'error') {
      node.textContent = plan.error;
      node.classList.add('ipr-plan-error');
      return;
    }
    node.classList.remove('ipr-plan-error');
    const rows = plan.plan.cells.filter(c => c.cell_id !== null || c.verdict === 'unknown');
    const head = document.createElement('div');
    head.className = 'ipr-plan-total';
    const restoring = rows.filter(c => c.verdict === 'restore').length;
    head.textContent = rows.length
      ? `Run All would restore ${restoring} of ${rows.length} checkpointed cells, saving ${formatDuration(plan.plan.saved)}.`
      : 'No %%checkpoint cells in this notebook.';
    const close = document.createElement('button');
    close.className = 'ipr-plan-close';
    close.textContent = '×';
    close.title = 'Clear the plan and its badges';
    close.addEventListener('click', () => this.model.clearPlan());
    head.append(close);
    const list = document.createElement('ol');
    list.className = 'ipr-plan-list';
    for (const cell of rows) {
      const item = document.createElement('li');
      item.className = 'ipr-plan-row';
      item.dataset.verdict = cell.verdict;
      item.dataset.cellId = cell.cell_id ?? '';
      const name = document.createElement('b');
      name.textContent = cell.cell_id ?? `cell ${cell.position}`;
      const what =
        cell.verdict === 'restore'
          ? `would restore (saves ${formatDuration(cell.saves)})`
          : cell.verdict === 'execute'
            ? `would execute: ${cell.reason}`
            : `${cell.verdict}: ${cell.reason}`;
      item.append(name, document.createTextNode(` ${what}`));
      list.append(item);
    }
    node.append(head, list);
  }
}
