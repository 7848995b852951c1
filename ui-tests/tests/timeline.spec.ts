/**
 * What a user sees and clicks: the side panel and the in-notebook widget.
 *
 * Every test saves a screenshot in its Playwright output folder
 * (ui-tests/test-results/...); with IPY_RESUME_DOCS_DIR set, the panel and
 * widget pictures are also written there for the README.
 */

import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { Locator, TestInfo } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

const PANEL = '#ipy-resume-timeline';

/** Writes 10,000 journal events over 20 kernel sessions into ./.ipy_resume. */
const MAKE_EVENTS = `
import json, random, sqlite3
from pathlib import Path
from ipy_resume.store.journal import Event, Journal

root = Path(".ipy_resume")
Journal(root).append(Event(cell_id="cell0", session="s0000", outcome="executed", started=1.7e9))
random.seed(7)
rows, t = [], 1.7e9
for i in range(1, 10000):
    t += 3600 * 20 if i % 500 == 0 else random.uniform(1, 40)
    e = Event(
        cell_id=f"cell{i % 37}", session=f"s{i // 500:04d}", started=t,
        outcome=random.choice(["executed", "restored", "restored", "incomplete", "failed"]),
        checkpoint_id=f"{i:016x}", duration=random.uniform(0.1, 90),
        bytes=random.randint(0, 10**8), names=["a", "b"],
    )
    rows.append((e.event_id, e.checkpoint_id, e.cell_id, e.session, e.started, e.created,
                 e.duration, e.bytes, json.dumps(e.names), e.outcome))
with sqlite3.connect(root / "journal.sqlite") as conn:
    conn.executemany(
        "INSERT INTO events (event_id, checkpoint_id, cell_id, session, started, created,"
        " duration, bytes, names, outcome) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
print(len(Journal(root).events()))
`;

async function shot(target: Locator, testInfo: TestInfo, name: string, docs = false): Promise<void> {
  const file = testInfo.outputPath(name);
  await target.screenshot({ path: file });
  await testInfo.attach(name, { path: file, contentType: 'image/png' });
  const docsDir = process.env.IPY_RESUME_DOCS_DIR;
  if (docs && docsDir) {
    fs.mkdirSync(docsDir, { recursive: true });
    fs.copyFileSync(file, path.join(docsDir, name));
  }
}

async function openPanel(page: IJupyterLabPageFixture): Promise<Locator> {
  await page.sidebar.openTab('ipy-resume-timeline');
  await page.sidebar.setWidth(560, 'right');
  const panel = page.locator(PANEL);
  await expect(panel).toBeVisible();
  return panel;
}

async function fillNotebook(page: IJupyterLabPageFixture, cells: string[]): Promise<void> {
  await page.notebook.setCell(0, 'code', cells[0]);
  for (const source of cells.slice(1)) {
    await page.notebook.addCell('code', source);
  }
}

/** Add a code cell at the end, run it, and return its index. */
async function appendAndRun(page: IJupyterLabPageFixture, source: string): Promise<number> {
  await page.notebook.addCell('code', source);
  const index = (await page.notebook.getCellCount()) - 1;
  await page.notebook.runCell(index);
  return index;
}

async function outputText(page: IJupyterLabPageFixture, index: number): Promise<string> {
  return ((await page.notebook.getCellTextOutput(index)) ?? []).join('');
}

test.describe('timeline side panel', () => {
  test('two checkpoints appear, restore the first, go to cell, live updates', async ({ page }, testInfo) => {
    await page.notebook.createNew('experiment.ipynb');
    await fillNotebook(page, [
      '%load_ext ipy_resume',
      '%%checkpoint first\nx = 10\nprint("first ran")',
      '%%checkpoint second\nx = x + 5\ny = "later"\nprint("second ran")',
      'print(x, "y" in globals())'
    ]);
    const panel = await openPanel(page);
    await page.notebook.run();
    expect(await outputText(page, 3)).toContain('15 True');

    const rows = panel.locator('.ipr-row');
    await expect(rows).toHaveCount(2);
    await expect(rows.nth(0)).toHaveAttribute('data-cell-id', 'first');
    await expect(rows.nth(1)).toHaveAttribute('data-cell-id', 'second');
    await expect(panel.locator('.ipr-status')).toHaveAttribute('data-status', 'live');
    await expect(panel.locator('.ipr-session')).toHaveCount(1);
    await expect(panel.locator('.ipr-stat-checkpoints b')).toHaveText('2');
    await expect(panel.locator('canvas.ipr-canvas')).toHaveAttribute('data-marks', '2');

    // Select the first: its stored names and key parts show.
    await rows.nth(0).click();
    await expect(panel.locator('.ipr-details-cell')).toHaveText('first');
    await expect(panel.locator('.ipr-name-row[data-name="x"]')).toBeVisible();

    // Go to cell: the notebook's active cell becomes the one with %%checkpoint first.
    await page.notebook.selectCells(3);
    await panel.locator('.ipr-goto').click();
    await expect(page.locator('.jp-Notebook .jp-Cell.jp-mod-active')).toContainText('%%checkpoint first');

    // Restore asks to confirm first.
    await panel.locator('.ipr-restore').click();
    await expect(panel.locator('.ipr-confirm-text')).toContainText("checkpoint");
    await panel.locator('.ipr-confirm').click();
    await expect(panel.locator('.ipr-notice-success')).toContainText('restored');
    await expect(panel.locator('.ipr-notice-success')).toContainText('removed y');
    await shot(panel, testInfo, 'panel-restored.png');

    // The kernel really went back: x as of 'first', y gone.
    await page.notebook.runCell(3);
    expect(await outputText(page, 3)).toContain('10 False');

    // The restore itself is on the timeline: a third row, marked resumed.
    await expect(rows).toHaveCount(3);
    await expect(rows.nth(2)).toHaveAttribute('data-cell-id', 'first');
    await expect(rows.nth(2)).toHaveAttribute('data-outcome', 'resumed');

    // Running 'second' again hits its checkpoint: a fourth row, live, marked restored.
    await page.notebook.runCell(2);
    await expect(rows).toHaveCount(4);
    await expect(rows.nth(3)).toHaveAttribute('data-cell-id', 'second');
    await expect(rows.nth(3)).toHaveAttribute('data-outcome', 'restored');
    await expect(panel.locator('.ipr-stat-hit-rate b')).not.toHaveText('0%');
    await page.notebook.runCell(3);
    expect(await outputText(page, 3)).toContain('15 True');
    await shot(panel, testInfo, 'panel.png', true);

    // A newer checkpoint of 'first', then gc keeping one per cell: the older one is gone.
    // Its rows (the run and the restore to it) stay on the timeline, greyed and not restorable.
    await appendAndRun(page, '%%checkpoint first\nx = 11');
    await expect(rows).toHaveCount(5);
    const gc = await appendAndRun(page, '%checkpoint gc --keep-last 1');
    expect(await outputText(page, gc)).toContain('removed 1 checkpoint');
    await expect(rows.nth(0)).toHaveAttribute('data-unavailable', 'true');
    await expect(rows.nth(2)).toHaveAttribute('data-unavailable', 'true');
    await expect(rows.nth(1)).toHaveAttribute('data-unavailable', 'false');
    await expect(rows.nth(4)).toHaveAttribute('data-unavailable', 'false');
    await rows.nth(0).click();
    await expect(panel.locator('.ipr-restore')).toBeDisabled();
    await expect(panel.locator('.ipr-facts')).toContainText('gone');
    await rows.nth(4).click();
    await expect(panel.locator('.ipr-restore')).toBeEnabled();
  });

  test('states: not loaded, live, busy, then restarting with the timeline from disk', async ({ page }, testInfo) => {
    await page.notebook.createNew('states.ipynb');
    await fillNotebook(page, ['1 + 1']);
    await page.notebook.run();
    const panel = await openPanel(page);
    const status = panel.locator('.ipr-status');
    await expect(status).toHaveAttribute('data-status', 'not-loaded');
    await expect(panel.locator('.ipr-load-line')).toHaveText('%load_ext ipy_resume');
    await shot(panel, testInfo, 'panel-not-loaded.png');

    await page.notebook.setCell(0, 'code', '%load_ext ipy_resume');
    await page.notebook.addCell('code', '%%checkpoint only\nz = 42');
    await page.notebook.run();
    await expect(status).toHaveAttribute('data-status', 'live');
    await expect(panel.locator('.ipr-row')).toHaveCount(1);

    // A long cell: the panel says the kernel is busy, then live again.
    await page.notebook.addCell('code', 'import time\ntime.sleep(4)');
    const running = page.notebook.runCell(2);
    await expect(status).toHaveAttribute('data-status', 'busy');
    await running;
    await expect(status).toHaveAttribute('data-status', 'live');

    // The kernel process dies (as in a crash) and the server restarts it. The panel
    // goes offline with the rows still there, read from disk, and once the new kernel
    // is up it says the extension must be loaded again.
    await page.evaluate(() => {
      const seen: string[] = [];
      (window as any).__iprStatuses = seen;
      const node = document.querySelector('#ipy-resume-timeline .ipr-status')!;
      new MutationObserver(() => seen.push(node.getAttribute('data-status') ?? '')).observe(node, {
        attributes: true,
        attributeFilter: ['data-status']
      });
    });
    await page.notebook.addCell('code', 'import os, threading\nthreading.Timer(0.5, os._exit, [1]).start()');
    // Running the sleep cell may have added an empty cell below: run the last one.
    await page.notebook.runCell((await page.notebook.getCellCount()) - 1);
    const dialog = page.locator('.jp-Dialog');
    await expect(async () => {
      if (await dialog.count()) {
        await dialog.locator('button.jp-mod-accept, button').last().click();
      }
      const seen: string[] = await page.evaluate(() => (window as any).__iprStatuses);
      expect(seen).toContain('offline');
      await expect(status).toHaveAttribute('data-status', 'not-loaded', { timeout: 1000 });
    }).toPass({ timeout: 90000 });
    await expect(panel.locator('.ipr-row')).toHaveCount(1);
    await expect(panel.locator('.ipr-row').first()).toHaveAttribute('data-cell-id', 'only');
    await expect(panel.locator('.ipr-restore')).toHaveCount(0);
    await panel.locator('.ipr-row').first().click();
    await expect(panel.locator('.ipr-restore')).toBeDisabled();
    // Details still come from disk through the server handler.
    await expect(panel.locator('.ipr-name-row[data-name="z"]')).toBeVisible();
    await shot(panel, testInfo, 'panel-after-restart.png');
  });

  test('10,000 events load without freezing the page', async ({ page, tmpPath }, testInfo) => {
    // A script file, because the cell editor re-indents typed Python.
    await page.contents.uploadContent(MAKE_EVENTS, 'text', `${tmpPath}/make_events.py`);
    await page.notebook.createNew('big.ipynb');
    await fillNotebook(page, ['%run make_events.py', '%load_ext ipy_resume']);
    const panel = await openPanel(page);
    await page.notebook.run();
    expect(await outputText(page, 0)).toContain('10000');

    const started = Date.now();
    await expect(panel.locator('.ipr-status')).toHaveAttribute('data-status', 'live');
    await expect(panel.locator('.ipr-stat-events b')).toHaveText('10000');
    await expect(panel.locator('canvas.ipr-canvas')).toHaveAttribute('data-marks', '10000');
    const loadMs = Date.now() - started;
    expect(loadMs).toBeLessThan(15000);

    // Virtualised: only a screenful of rows exists, newest last and in view.
    const rowCount = await panel.locator('.ipr-row').count();
    expect(rowCount).toBeGreaterThan(3);
    expect(rowCount).toBeLessThan(120);
    await expect(panel.locator('.ipr-row').last()).toHaveAttribute('data-seq', '10000');

    // The page keeps drawing frames while the list scrolls and the strip is hovered.
    const list = panel.locator('.ipr-list');
    const canvas = panel.locator('canvas.ipr-canvas');
    const box = (await canvas.boundingBox())!;
    const worstGap = await page.evaluate(async () => {
      const list = document.querySelector('#ipy-resume-timeline .ipr-list') as HTMLElement;
      let worst = 0;
      let last = performance.now();
      for (let i = 0; i < 40; i++) {
        list.scrollTop = (list.scrollHeight * i) / 40;
        list.dispatchEvent(new Event('scroll'));
        await new Promise(r => requestAnimationFrame(() => r(null)));
        const now = performance.now();
        worst = Math.max(worst, now - last);
        last = now;
      }
      return worst;
    });
    expect(worstGap).toBeLessThan(250);
    for (let i = 0; i < 10; i++) {
      await page.mouse.move(box.x + (box.width * (i + 0.5)) / 10, box.y + 18);
    }
    // Hovering a mark shows its details.
    await expect(panel.locator('.ipr-tooltip')).toBeVisible();
    await expect(panel.locator('.ipr-tooltip')).toContainText('cell');
    await list.evaluate((node: HTMLElement) => {
      node.scrollTop = node.scrollHeight / 2;
      node.dispatchEvent(new Event('scroll'));
    });
    const middle = Number(await panel.locator('.ipr-row').first().getAttribute('data-seq'));
    expect(middle).toBeGreaterThan(3000);
    expect(middle).toBeLessThan(7000);
    // A row in view (the first few are the overscan above it) can be selected.
    const target = panel.locator('.ipr-row').nth(12);
    const seq = await target.getAttribute('data-seq');
    await target.click();
    await expect(panel.locator(`.ipr-row.ipr-selected[data-seq="${seq}"]`)).toHaveCount(1);
    testInfo.annotations.push({ type: 'load-ms', description: String(loadMs) });
    testInfo.annotations.push({ type: 'worst-frame-ms', description: worstGap.toFixed(1) });
    await shot(panel, testInfo, 'panel-10000-events.png');
  });
});

test.describe('timeline widget', () => {
  test('renders in the notebook and restores', async ({ page }, testInfo) => {
    await page.notebook.createNew('widget.ipynb');
    await fillNotebook(page, [
      '%load_ext ipy_resume',
      '%%checkpoint prepare\nimport numpy as np\ndata = np.arange(200_000, dtype="float64")\nscale = 1',
      '%%checkpoint rescale\nscale = 3\ndata = data * scale',
      'from ipy_resume import timeline\ntimeline()'
    ]);
    await page.notebook.run();
    const widget = page.locator('.jp-OutputArea .ipr-widget');
    await expect(widget).toBeVisible();
    const rows = widget.locator('.ipr-row');
    await expect(rows).toHaveCount(2);
    await expect(rows.nth(0)).toHaveAttribute('data-cell-id', 'prepare');
    await expect(rows.nth(1)).toHaveAttribute('data-cell-id', 'rescale');
    await expect(widget.locator('canvas.ipr-canvas')).toHaveAttribute('data-marks', '2');

    await rows.nth(0).click();
    await expect(widget.locator('.ipr-name-row[data-name="data"]')).toContainText('200000');
    await widget.locator('.ipr-restore').click();
    await widget.locator('.ipr-confirm').click();
    await expect(widget.locator('.ipr-notice-success')).toContainText('restored');
    await shot(widget, testInfo, 'widget.png', true);

    await page.notebook.addCell('code', 'print(scale, float(data[-1]))');
    await page.notebook.runCell(4);
    expect(await outputText(page, 4)).toContain('1 199999.0');

    // A checkpoint run anywhere in the notebook shows up in the widget by itself.
    await page.notebook.addCell('code', '%%checkpoint extra\nq = scale + 1');
    await page.notebook.runCell((await page.notebook.getCellCount()) - 1);
    // Rows: prepare, rescale, the restore (resumed), extra.
    await expect(rows).toHaveCount(4);
    await expect(rows.nth(2)).toHaveAttribute('data-outcome', 'resumed');
    await expect(rows.nth(3)).toHaveAttribute('data-cell-id', 'extra');
  });
});

test.describe('timeline widget in Notebook 7', () => {
  test('renders in the classic-style notebook page', async ({ page, browser, baseURL, tmpPath }, testInfo) => {
    const source = (text: string) => ({ cell_type: 'code', metadata: {}, outputs: [], execution_count: null, source: text });
    const notebook = {
      nbformat: 4,
      nbformat_minor: 5,
      metadata: { kernelspec: { name: 'python3', display_name: 'Python 3', language: 'python' } },
      cells: [
        source('%load_ext ipy_resume'),
        source('%%checkpoint alpha\na = 1'),
        source('%%checkpoint beta\nb = a + 1'),
        source('from ipy_resume import timeline\ntimeline()')
      ]
    };
    await page.contents.uploadContent(JSON.stringify(notebook), 'text', `${tmpPath}/nb7.ipynb`);
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    const nb7 = await context.newPage();
    try {
      await nb7.goto(`${baseURL}/notebooks/${tmpPath}/nb7.ipynb`);
      await expect(nb7.locator('.jp-Notebook .jp-Cell').first()).toBeVisible({ timeout: 60000 });
      // Once the kernel is up, Run → Run All Cells, as a user would.
      await expect(nb7.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]')).toBeVisible({
        timeout: 60000
      });
      await nb7.locator('.jp-Notebook .jp-Cell').first().click();
      await nb7.locator('.lm-MenuBar-item', { hasText: /^Run$/ }).click();
      await nb7.locator('.lm-Menu-itemLabel', { hasText: /^Run All Cells$/ }).click();
      const widget = nb7.locator('.jp-OutputArea .ipr-widget');
      await expect(widget).toBeVisible({ timeout: 60000 });
      const rows = widget.locator('.ipr-row');
      await expect(rows).toHaveCount(2);
      await expect(rows.nth(0)).toHaveAttribute('data-cell-id', 'alpha');
      await expect(rows.nth(1)).toHaveAttribute('data-cell-id', 'beta');
      await shot(widget, testInfo, 'widget-notebook7.png');
    } finally {
      await context.close();
    }
  });
});
