"""Write the corpus notebooks from the cell lists below: ``python tests/corpus/make_corpus.py``.

The corpus is a set of data-science tutorials of the kind a user writes, run by
``tests/test_corpus.py`` three ways (plain, every cell checkpointed, and restored
in a fresh kernel) to show that ipy_resume restores what a real notebook needs.
The sources live here so that a diff of a notebook is a diff of Python; the
``.ipynb`` files next to this script are what the tests run.

Cell metadata ``ipy_resume.files`` lists the files a cell writes that later cells
read: the harness turns it into ``%%checkpoint cK --files ...``, as a user would.

Regenerating is byte-identical (stable cell ids, nbformat's sorted JSON), which
the tests check: edit this script, never the ``.ipynb`` files.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent


def md(text: str) -> Any:
    return new_markdown_cell(text.strip("\n"))


def code(text: str, files: list[str] | None = None) -> Any:
    cell = new_code_cell(text.strip("\n"))
    if files:
        cell.metadata["ipy_resume"] = {"files": list(files)}
    return cell


# ---- 1. iris ------------------------------------------------------------------------------

IRIS = [
    md(r"""
# Classifying iris flowers with a scikit-learn pipeline

The classic iris measurements, a scaler and a logistic regression chained in a
`Pipeline`, a small grid search over the regularisation strength, and a look at
what the model gets wrong.
"""),
    code(r"""
%matplotlib inline
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
import seaborn as sns
from sklearn.datasets import load_iris
"""),
    code(r"""
sns.set_theme(style="whitegrid", palette="deep")
pd.set_option("display.precision", 3)
"""),
    md("## The data"),
    code(r"""
iris = load_iris()
print(iris.DESCR[:420])
"""),
    code(r"""
X, y = iris.data, iris.target
feature_names = [name.replace(" (cm)", "") for name in iris.feature_names]
X.shape, y.shape
"""),
    code(r"""
df = pd.DataFrame(X, columns=feature_names)
df["species"] = pd.Categorical.from_codes(y, iris.target_names)
df.head()
"""),
    code(r"""
df.describe()
"""),
    code(r"""
df.groupby("species", observed=True).mean()
"""),
    md("Petal measurements separate the species far better than sepal ones:"),
    code(r"""
ax = sns.scatterplot(data=df, x="petal length", y="petal width", hue="species")
ax.set_title("Petals separate the species")
"""),
    code(r"""
xlim = ax.get_xlim()
print(f"petal length spans {xlim[0]:.1f} to {xlim[1]:.1f} cm on the plot")
"""),
    md("## A pipeline"),
    code(r"""
from sklearn.model_selection import train_test_split

X_train, X_test, y_train, y_test = train_test_split(
    X, y, test_size=0.3, stratify=y, random_state=0
)
"""),
    code(r"""
from sklearn.preprocessing import StandardScaler
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline

scaler = StandardScaler()
logreg = LogisticRegression(max_iter=500)
pipe = Pipeline([("scale", scaler), ("clf", logreg)])
pipe
"""),
    code(r"""
pipe.fit(X_train, y_train)
print("train accuracy", round(pipe.score(X_train, y_train), 3))
"""),
    md("The scaler inside the pipeline is the `scaler` defined above, now fitted:"),
    code(r"""
scaler.mean_.round(2)
"""),
    code(r"""
from sklearn.model_selection import cross_val_score

scores = cross_val_score(pipe, X, y, cv=5)
scores.mean(), scores.std()
"""),
    md("## Tuning `C`"),
    code(r"""
from sklearn.model_selection import GridSearchCV

param_grid = {"clf__C": [0.1, 1.0, 10.0]}
grid = GridSearchCV(pipe, param_grid, cv=3)
grid.fit(X_train, y_train)
grid.best_params_
"""),
    code(r"""
results = pd.DataFrame(grid.cv_results_)[
    ["param_clf__C", "mean_test_score", "std_test_score", "rank_test_score"]
]
results
"""),
    code(r"""
from sklearn.metrics import accuracy_score, confusion_matrix

best = grid.best_estimator_
y_pred = best.predict(X_test)
acc = accuracy_score(y_test, y_pred)
print(f"test accuracy: {acc:.3f}")
"""),
    code(r"""
cm = confusion_matrix(y_test, y_pred)
fig, ax = plt.subplots(figsize=(4, 3))
sns.heatmap(cm, annot=True, fmt="d", cmap="Blues",
            xticklabels=iris.target_names, yticklabels=iris.target_names, ax=ax)
ax.set_xlabel("predicted")
ax.set_ylabel("true");
"""),
    code(r"""
ax.set_title(f"Confusion matrix (accuracy {acc:.2f})")
fig
"""),
    code(r"""
coef = pd.DataFrame(best.named_steps["clf"].coef_, index=iris.target_names, columns=feature_names)
coef.round(2)
"""),
    md("## Using the model"),
    code(r"""
def predict_species(measurements):
    "Name the species for one flower's four measurements in cm, with its probability."
    probs = best.predict_proba([measurements])[0]
    return iris.target_names[probs.argmax()], probs.max()
"""),
    code(r"""
for sample in ([5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 2.8, 4.3, 1.3]):
    name, p = predict_species(sample)
    print(f"{sample} -> {name} ({p:.0%})")
"""),
    code(r"""
test_frame = pd.DataFrame(X_test, columns=feature_names)
test_frame["true"] = iris.target_names[y_test]
test_frame["predicted"] = iris.target_names[y_pred]
test_frame[test_frame["true"] != test_frame["predicted"]]
"""),
    code(r"""
h = plt.hist(best.predict_proba(X_test).max(axis=1), bins=10, color="tab:green")
plt.xlabel("confidence of the predicted class");
"""),
    code(r"""
print(f"{int(h[0][-1])} of {len(X_test)} test flowers are predicted with confidence "
      f"in the top bin ({h[1][-2]:.2f}-{h[1][-1]:.2f})")
"""),
]

# ---- 2. digits ----------------------------------------------------------------------------

DIGITS = [
    md(r"""
# Handwritten digits: PCA, an SVM and a robustness check

8x8 images of digits from scikit-learn. We compress them with PCA, train an
RBF support vector machine with a small grid search, compare with k-nearest
neighbours and see how accuracy degrades when the images get noisy.
"""),
    code(r"""
%matplotlib inline
import numpy as np
import matplotlib.pyplot as plt
import seaborn as sns
from sklearn.datasets import load_digits
"""),
    code(r"""
digits = load_digits()
images, labels = digits.images, digits.target
print(images.shape, labels.shape)
"""),
    code(r"""
fig, axes = plt.subplots(2, 5, figsize=(8, 3.5))
for ax, image, label in zip(axes.ravel(), images, labels):
    ax.imshow(image, cmap="gray_r")
    ax.set_title(str(label))
    ax.axis("off")
"""),
    code(r"""
counts = np.bincount(labels)
counts
"""),
    md("Pixels run from 0 to 16; scale them to [0, 1]."),
    code(r"""
X = digits.data / 16.0
X.min(), X.max()
"""),
    code(r"""
flat = images.reshape(len(images), -1)
np.shares_memory(flat, images)
"""),
    code(r"""
from sklearn.model_selection import train_test_split

X_train, X_test, y_train, y_test = train_test_split(
    X, labels, test_size=0.25, random_state=42, stratify=labels
)
len(X_train), len(X_test)
"""),
    md("## How many components?"),
    code(r"""
from sklearn.decomposition import PCA

pca = PCA(n_components=30, random_state=0)
X_train_p = pca.fit_transform(X_train)
X_test_p = pca.transform(X_test)
print(f"30 components keep {pca.explained_variance_ratio_.sum():.1%} of the variance")
"""),
    code(r"""
fig2, ax2 = plt.subplots(figsize=(5, 3))
ax2.plot(np.cumsum(pca.explained_variance_ratio_), marker=".")
ax2.set_xlabel("components")
ax2.set_ylabel("cumulative explained variance");
"""),
    code(r"""
ax2.axhline(0.9, color="gray", linestyle="--")
ax2.annotate("90 %", xy=(1, 0.91))
fig2
"""),
    code(r"""
proj = PCA(n_components=2, random_state=0).fit_transform(X)
ax = sns.scatterplot(x=proj[:, 0], y=proj[:, 1], hue=labels, palette="tab10", s=12, legend="full")
ax.set_title("digits in the first two principal components")
"""),
    code(r"""
ax.figure.get_size_inches()
"""),
    md("## A support vector machine"),
    code(r"""
from sklearn.svm import SVC
from sklearn.pipeline import make_pipeline

svc = SVC(kernel="rbf", gamma="scale")
model = make_pipeline(PCA(n_components=30, random_state=0), svc)
model.fit(X_train, y_train)
model.score(X_test, y_test)
"""),
    code(r"""
from sklearn.model_selection import GridSearchCV

search = GridSearchCV(model, {"svc__C": [1, 10], "svc__gamma": ["scale", 0.05]}, cv=3)
search.fit(X_train, y_train)
print(search.best_params_, round(search.best_score_, 4))
"""),
    code(r"""
import pandas as pd

cv = pd.DataFrame(search.cv_results_)
cv["gamma"] = cv["param_svc__gamma"].astype(str)
cv.pivot_table(index="param_svc__C", columns="gamma", values="mean_test_score")
"""),
    code(r"""
from sklearn.metrics import classification_report, confusion_matrix

y_pred = search.predict(X_test)
print(classification_report(y_test, y_pred, digits=3))
"""),
    code(r"""
cm = confusion_matrix(y_test, y_pred)
ax_cm = sns.heatmap(cm, annot=True, fmt="d", cbar=False, cmap="mako")
ax_cm.set(xlabel="predicted", ylabel="true")
"""),
    code(r"""
wrong = np.flatnonzero(y_pred != y_test)
print(f"{len(wrong)} mistakes out of {len(y_test)}")
"""),
    code(r"""
fig3, axes3 = plt.subplots(1, 6, figsize=(9, 2))
for ax_, idx in zip(axes3, wrong[:6]):
    ax_.imshow(X_test[idx].reshape(8, 8), cmap="gray_r")
    ax_.set_title(f"{y_test[idx]} → {y_pred[idx]}")
for ax_ in axes3:
    ax_.axis("off")
"""),
    md("## Nearest neighbours in PCA space"),
    code(r"""
from sklearn.neighbors import KNeighborsClassifier

knn_scores = {}
for k in (1, 3, 5, 7):
    knn = KNeighborsClassifier(n_neighbors=k).fit(X_train_p, y_train)
    knn_scores[k] = knn.score(X_test_p, y_test)
knn_scores
"""),
    code(r"""
best_k = max(knn_scores, key=knn_scores.get)
print("best k:", best_k)
"""),
    md("## Robustness to noise"),
    code(r"""
def noisy(images, level, rng):
    "Add uniform noise and clip back to the [0, 1] pixel range."
    return np.clip(images + rng.uniform(-level, level, size=images.shape), 0, 1)
"""),
    code(r"""
rng = np.random.default_rng(2024)
robustness = {level: search.score(noisy(X_test, level, rng), y_test) for level in (0.0, 0.1, 0.2, 0.4)}
robustness
"""),
    code(r"""
plt.plot(list(robustness), list(robustness.values()), "o-")
plt.xlabel("noise level")
plt.ylabel("accuracy");
"""),
    code(r"""
augmented = noisy(X_train, 0.1, rng)
augmented.shape, rng.integers(0, 100)
"""),
]

# ---- 3. sales -----------------------------------------------------------------------------

SALES = [
    md(r"""
# Cleaning and summarising a sales export

The till system exports one row per order. We write a synthetic export, read it
back the way we would read the real one, clean it in place, join the product
catalogue and summarise revenue and margin by region, product and customer tier.
"""),
    code(r"""
import numpy as np
import pandas as pd

pd.set_option("display.max_columns", 12)
pd.set_option("display.width", 120)
"""),
    md("## A synthetic export"),
    code(
        r"""
rng = np.random.default_rng(11)
n = 600
regions = np.array(["north", "south", "east", "west"])
products = np.array(["Widget", "Gadget", "Doohickey", "Gizmo", "Thingamajig"])
raw = pd.DataFrame({
    "order_id": np.arange(1000, 1000 + n),
    "date": pd.date_range("2024-01-01", periods=n, freq="13h").strftime("%Y-%m-%d"),
    "region": rng.choice(regions, n),
    "product": rng.choice(products, n),
    "units": rng.integers(1, 20, n),
    "unit_price": rng.choice([4.99, 9.99, 14.5, 19.0, 24.75], n),
    "customer": [f"  cust-{i:03d} " for i in rng.integers(0, 120, n)],
})
raw.loc[rng.choice(n, 15, replace=False), "units"] = -1  # the till records a return as -1
raw.to_csv("sales_export.csv", index=False)
print(f"wrote {len(raw)} rows")
""",
        files=["sales_export.csv"],
    ),
    code(r"""
sales = pd.read_csv("sales_export.csv", parse_dates=["date"])
sales.dtypes
"""),
    code(r"""
sales.head(8)
"""),
    md("## Cleaning in place"),
    code(r"""
sales["customer"] = sales["customer"].str.strip().str.upper()
sales["region"] = sales["region"].str.title()
sales = sales.rename(columns={"unit_price": "price"})
sales.columns.tolist()
"""),
    code(r"""
returns = sales["units"] < 0
print(f"{returns.sum()} returned orders")
sales.loc[returns, "units"] = 0
"""),
    code(r"""
sales["revenue"] = sales["units"] * sales["price"]
sales["month"] = sales["date"].dt.to_period("M").astype(str)
sales["region"] = sales["region"].astype("category")
sales.info()
"""),
    md("## Revenue by region and month"),
    code(r"""
by_region = (
    sales.groupby("region", observed=True)["revenue"]
    .agg(["sum", "mean", "count"])
    .sort_values("sum", ascending=False)
)
by_region
"""),
    code(r"""
monthly = sales.pivot_table(index="month", columns="region", values="revenue",
                            aggfunc="sum", observed=True)
monthly.round(0)
"""),
    md("## Margin: join the product catalogue"),
    code(r"""
catalog = pd.DataFrame({
    "product": ["Widget", "Gadget", "Doohickey", "Gizmo", "Thingamajig"],
    "category": ["tools", "electronics", "tools", "electronics", "misc"],
    "unit_cost": [2.1, 6.0, 7.5, 11.0, 9.9],
})
catalog["category"] = catalog["category"].astype("category")
"""),
    code(r"""
sales = sales.merge(catalog, on="product", how="left", validate="many_to_one")
sales["margin"] = sales["revenue"] - sales["units"] * sales["unit_cost"]
sales[["order_id", "product", "category", "revenue", "margin"]].head()
"""),
    code(r"""
sales.groupby(["category", "region"], observed=True)["margin"].sum().unstack().style.format("{:,.0f}")
"""),
    md("## Customers"),
    code(r"""
customers = sales.groupby("customer").agg(orders=("order_id", "count"), revenue=("revenue", "sum"))
top = customers.nlargest(10, "revenue")
top
"""),
    code(r"""
def tier(revenue):
    "Loyalty tier from a customer's total revenue."
    if revenue >= 1000:
        return "gold"
    if revenue >= 600:
        return "silver"
    return "bronze"
"""),
    code(r"""
customers["tier"] = pd.Categorical(customers["revenue"].map(tier),
                                   categories=["bronze", "silver", "gold"], ordered=True)
customers["tier"].value_counts().sort_index()
"""),
    code(r"""
sales = sales.merge(customers[["tier"]], left_on="customer", right_index=True)
sales.groupby("tier", observed=True)["units"].mean()
"""),
    md("## Plots"),
    code(r"""
%matplotlib inline
import matplotlib.pyplot as plt

h = plt.hist(sales.loc[sales["units"] > 0, "revenue"], bins=20, color="tab:blue", edgecolor="white")
plt.title("revenue per order")
"""),
    code(r"""
peak = h[1][np.argmax(h[0])]
print(f"most orders bring in between {peak:.0f} and {peak + (h[1][1] - h[1][0]):.0f}")
"""),
    code(r"""
fig, ax = plt.subplots(figsize=(7, 3))
monthly.plot(ax=ax, marker="o")
ax.set_ylabel("revenue")
"""),
    code(r"""
ax.legend(title="region", ncol=4, loc="upper left")
ax.set_ylim(0, monthly.max().max() * 1.3)
fig
"""),
    code(r"""
flagged = sales[sales["product"].str.contains("g", case=False) & (sales["margin"] < 0)]
len(flagged), sorted(flagged["product"].unique())
"""),
    md("## A report for the weekly meeting"),
    code(
        r"""
weekday_order = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
summary = (
    sales.assign(weekday=sales["date"].dt.day_name())
    .groupby("weekday")["revenue"].sum()
    .reindex(weekday_order)
)
summary.to_csv("revenue_by_weekday.csv")
summary.round(2)
""",
        files=["revenue_by_weekday.csv"],
    ),
    code(r"""
check = pd.read_csv("revenue_by_weekday.csv", index_col=0)
assert np.allclose(check["revenue"], summary)
print("report written:", check.shape)
"""),
    code(r"""
pd.set_option("display.float_format", "{:,.2f}".format)
sales.describe()
"""),
]

# ---- 4. scipy.stats -----------------------------------------------------------------------

DISTRIBUTIONS = [
    md(r"""
# Which distribution fits the waiting times?

Waiting times at a service desk are positive and skewed. We fit a gamma, a
normal and an exponential model with `scipy.stats`, compare them by AIC and
Kolmogorov-Smirnov tests, bootstrap the shape parameter and test two groups.
"""),
    code(r"""
%matplotlib inline
import numpy as np
import matplotlib.pyplot as plt
from scipy import stats
from scipy.stats import norm, expon
"""),
    code(r"""
np.random.seed(3)
waits = np.random.gamma(shape=2.0, scale=1.5, size=800)
waits[:5].round(3)
"""),
    code(r"""
print(f"mean {waits.mean():.3f}, std {waits.std(ddof=1):.3f}, skew {stats.skew(waits):.3f}")
"""),
    code(r"""
counts, bins, patches = plt.hist(waits, bins=30, density=True, alpha=0.6, label="observed")
plt.xlabel("minutes");
"""),
    code(r"""
centers = (bins[:-1] + bins[1:]) / 2
mode_estimate = centers[np.argmax(counts)]
print(f"the busiest bin is centred at {mode_estimate:.2f} min ({len(patches)} bars)")
"""),
    md("## Three candidate models"),
    code(r"""
a, loc, scale = stats.gamma.fit(waits, floc=0)
print(f"gamma fit: shape {a:.3f}, scale {scale:.3f}")
"""),
    code(r"""
fitted = stats.gamma(a, loc=loc, scale=scale)
fitted.mean(), fitted.var()
"""),
    code(r"""
mu, sigma = norm.fit(waits)
lam = 1 / expon.fit(waits, floc=0)[1]
mu, sigma, lam
"""),
    code(r"""
grid = np.linspace(0, waits.max(), 200)
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.hist(waits, bins=bins, density=True, alpha=0.4, color="gray")
ax.plot(grid, fitted.pdf(grid), label="gamma")
ax.plot(grid, norm.pdf(grid, mu, sigma), label="normal")
ax.plot(grid, expon.pdf(grid, scale=1 / lam), label="exponential")
ax.legend()
"""),
    code(r"""
ax.set_title("three candidate models")
ax.set_xlim(0, 12)
fig
"""),
    code(r"""
def log_likelihood(dist, data):
    return np.sum(dist.logpdf(data))

candidates = {"gamma": fitted, "normal": norm(mu, sigma), "exponential": expon(scale=1 / lam)}
"""),
    code(r"""
n_params = {"gamma": 2, "normal": 2, "exponential": 1}
aic = {name: 2 * n_params[name] - 2 * log_likelihood(d, waits) for name, d in candidates.items()}
sorted(aic.items(), key=lambda kv: kv[1])
"""),
    code(r"""
ks = {name: stats.kstest(waits, d.cdf) for name, d in candidates.items()}
for name, res in ks.items():
    print(f"{name:12s} D={res.statistic:.4f}  p={res.pvalue:.3g}")
"""),
    code(r"""
fig_pp, ax_pp = plt.subplots(figsize=(4, 4))
(osm, osr), (slope, intercept, r) = stats.probplot(waits, dist=fitted, plot=ax_pp)
print(f"probability plot r = {r:.4f}")
"""),
    md("## How sure are we about the shape?"),
    code(r"""
def bootstrap_samples(data, n_resamples, seed):
    "Yield resamples of *data* drawn with replacement, one at a time."
    rng = np.random.default_rng(seed)
    for _ in range(n_resamples):
        yield rng.choice(data, size=len(data), replace=True)
"""),
    code(r"""
shapes = np.array([stats.gamma.fit(s, floc=0)[0] for s in bootstrap_samples(waits, 30, seed=5)])
low, high = np.percentile(shapes, [2.5, 97.5])
print(f"shape 95% interval: {low:.2f} to {high:.2f}")
"""),
    md("## Weekdays against weekends"),
    code(r"""
weekday = np.random.gamma(2.0, 1.5, 300)
weekend = np.random.gamma(2.0, 1.9, 200)
t = stats.ttest_ind(weekday, weekend, equal_var=False)
u = stats.mannwhitneyu(weekday, weekend)
print(t)
print(u)
"""),
    code(r"""
table = np.array([
    [(weekday > 5).sum(), (weekday <= 5).sum()],
    [(weekend > 5).sum(), (weekend <= 5).sum()],
])
chi2, p, dof, expected = stats.chi2_contingency(table)
print(f"chi2={chi2:.2f}, p={p:.3f}, dof={dof}")
expected.round(1)
"""),
    md("## Four customers in a row"),
    code(r"""
import random

random.seed(8)
sim = [sum(random.expovariate(1 / 3) for _ in range(4)) for _ in range(2000)]
print(f"simulated mean wait for four customers: {np.mean(sim):.2f}")
"""),
    code(r"""
erlang = stats.erlang(4, scale=3)
stats.kstest(sim, erlang.cdf).pvalue > 0.01
"""),
    code(r"""
def survival_table(dist, minutes):
    return {m: round(float(dist.sf(m)), 4) for m in minutes}

survival_table(fitted, [1, 2, 5, 10])
"""),
    code(r"""
ax_s = plt.figure(figsize=(5, 3)).add_subplot()
ax_s.step(np.sort(waits), 1 - np.arange(1, len(waits) + 1) / len(waits), where="post", label="empirical")
ax_s.plot(grid, fitted.sf(grid), label="gamma")
ax_s.set_yscale("log")
ax_s.legend();
"""),
    code(r"""
q = fitted.ppf([0.5, 0.9, 0.99])
dict(zip(["median", "p90", "p99"], q.round(2)))
"""),
    code(r"""
z = (waits - mu) / sigma
print("share beyond 2 sigma:", np.mean(np.abs(z) > 2).round(4), "expected:", round(2 * norm.sf(2), 4))
"""),
]

# ---- 5. training loop ---------------------------------------------------------------------

TRAINING = [
    md(r"""
# A small neural network in NumPy, trained resumably

A one-hidden-layer network on the two-moons data, written by hand: a model
class, an Adam optimiser that updates the model's arrays in place, a learning
rate schedule made by a closure and a generator of mini-batches. The training
loop uses `resumable`, so a crash mid-training continues from the last saved
epoch.
"""),
    code(r"""
%matplotlib inline
import numpy as np
import matplotlib.pyplot as plt
from ipy_resume import resumable
"""),
    code(r"""
from sklearn.datasets import make_moons

X, y = make_moons(n_samples=600, noise=0.25, random_state=1)
X.shape, y.mean()
"""),
    code(r"""
fig, ax = plt.subplots(figsize=(4.5, 3.5))
ax.scatter(X[:, 0], X[:, 1], c=y, cmap="coolwarm", s=8)
ax.set_title("two moons")
"""),
    code(r"""
perm = np.random.permutation(len(X))
train_idx, val_idx = perm[:450], perm[450:]
X_train, y_train = X[train_idx], y[train_idx]
X_val, y_val = X[val_idx], y[val_idx]
"""),
    md("## The model and the optimiser"),
    code(r'''
class MLP:
    """One hidden layer of tanh units and a sigmoid output."""

    def __init__(self, n_in, n_hidden, rng):
        self.W1 = rng.normal(0, 1 / np.sqrt(n_in), (n_in, n_hidden))
        self.b1 = np.zeros(n_hidden)
        self.W2 = rng.normal(0, 1 / np.sqrt(n_hidden), (n_hidden, 1))
        self.b2 = np.zeros(1)

    def params(self):
        return [self.W1, self.b1, self.W2, self.b2]

    def forward(self, X):
        self.h = np.tanh(X @ self.W1 + self.b1)
        return 1 / (1 + np.exp(-(self.h @ self.W2 + self.b2)))

    def gradients(self, X, y, p):
        """Gradients of the mean cross-entropy for the batch just passed forward."""
        d_out = (p - y)[:, None] / len(X)
        d_h = (d_out @ self.W2.T) * (1 - self.h ** 2)
        return [X.T @ d_h, d_h.sum(axis=0), self.h.T @ d_out, d_out.sum(axis=0)]
'''),
    code(r'''
class Adam:
    """Adam updates applied in place: the model's arrays are the optimiser's arrays."""

    def __init__(self, params, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8):
        self.params = params
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, grads):
        self.t += 1
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m *= self.beta1
            m += (1 - self.beta1) * g
            v *= self.beta2
            v += (1 - self.beta2) * g * g
            m_hat = m / (1 - self.beta1 ** self.t)
            v_hat = v / (1 - self.beta2 ** self.t)
            p -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
'''),
    code(r"""
def lr_schedule(base, decay):
    def at(epoch):
        return base / (1 + decay * epoch)
    return at

schedule = lr_schedule(0.05, 0.02)
[round(schedule(e), 4) for e in (0, 10, 50)]
"""),
    code(r'''
def minibatches(X, y, size, rng):
    """Yield shuffled mini-batches covering the data once."""
    order = rng.permutation(len(X))
    for start in range(0, len(X), size):
        idx = order[start:start + size]
        yield X[idx], y[idx]
'''),
    code(r"""
def bce(p, y):
    eps = 1e-9
    return float(-np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)))


def accuracy(model, X, y):
    return float(np.mean((model.forward(X)[:, 0] > 0.5) == y))
"""),
    code(r"""
rng = np.random.default_rng(0)
model = MLP(2, 16, rng)
opt = Adam(model.params(), lr=schedule(0))
history = {"loss": [], "val_acc": []}
"""),
    code(r"""
print(f"before training: loss {bce(model.forward(X_train)[:, 0], y_train):.3f}, "
      f"val acc {accuracy(model, X_val, y_val):.3f}")
"""),
    md("## Training (resumable, weights saved to `weights.npz`)"),
    code(
        r"""
for epoch in resumable(range(60), state=["model", "opt", "history", "rng"], every=10):
    opt.lr = schedule(epoch)
    losses = []
    for xb, yb in minibatches(X_train, y_train, 32, rng):
        p = model.forward(xb)[:, 0]
        opt.step(model.gradients(xb, yb, p))
        losses.append(bce(p, yb))
    history["loss"].append(np.mean(losses))
    history["val_acc"].append(accuracy(model, X_val, y_val))
    if epoch % 20 == 0:
        print(f"epoch {epoch:3d}  loss {history['loss'][-1]:.4f}  val acc {history['val_acc'][-1]:.3f}")
np.savez("weights.npz", *model.params())
""",
        files=["weights.npz"],
    ),
    code(r"""
fig_l, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(8, 3))
ax_loss.plot(history["loss"])
ax_loss.set_title("training loss")
ax_acc.plot(history["val_acc"], color="tab:green")
ax_acc.set_title("validation accuracy");
"""),
    code(r"""
ax_acc.axhline(max(history["val_acc"]), linestyle=":", color="gray")
ax_acc.set_ylim(0.5, 1.0)
fig_l
"""),
    code(r"""
all(a is b for a, b in zip(opt.params, model.params()))
"""),
    code(r"""
shapes = {name: array.shape for name, array in np.load("weights.npz").items()}
shapes
"""),
    md("## The decision boundary"),
    code(r"""
xx, yy = np.meshgrid(np.linspace(-2, 3, 120), np.linspace(-1.5, 2, 100))
grid_points = np.c_[xx.ravel(), yy.ravel()]
zz = model.forward(grid_points)[:, 0].reshape(xx.shape)
"""),
    code(r"""
ax.contourf(xx, yy, zz, levels=[0, 0.5, 1], alpha=0.2, cmap="coolwarm")
ax.set_title("two moons and the learned boundary")
fig
"""),
    code(r"""
val_pred = model.forward(X_val)[:, 0] > 0.5
confusion = np.zeros((2, 2), dtype=int)
np.add.at(confusion, (y_val, val_pred.astype(int)), 1)
confusion
"""),
    md("## Pruning small weights"),
    code(r"""
layers = {"hidden": model.W1, "output": model.W2}
hidden_view = model.W1[:, :4]
"""),
    code(r"""
small = np.abs(model.W1) < 0.05
print(f"pruning {small.sum()} of {small.size} hidden weights")
model.W1[small] = 0.0
accuracy(model, X_val, y_val)
"""),
    code(r"""
np.count_nonzero(layers["hidden"] == 0), np.count_nonzero(hidden_view == 0)
"""),
    code(r"""
import random

random.seed(1)
probe_points = [(random.uniform(-1, 2), random.uniform(-1, 1.5)) for _ in range(5)]
for point, prob in zip(probe_points, model.forward(np.array(probe_points))[:, 0]):
    print(f"{point[0]:+.2f}, {point[1]:+.2f} -> P(class 1) = {prob:.2f}")
"""),
    code(r"""
summary = {
    "epochs": len(history["loss"]),
    "final_loss": round(float(history["loss"][-1]), 4),
    "best_val_acc": max(history["val_acc"]),
}
summary
"""),
]

# ---- 6. text classification ---------------------------------------------------------------

TEXT = [
    md(r"""
# Routing support tickets with a bag-of-words model

A synthetic ticket queue with three topics, cleaned with pandas string methods,
a TF-IDF + naive Bayes pipeline with our own tokenizer, a small grid search,
and a router that hands uncertain tickets to a human.
"""),
    code(r"""
import re
import random
from collections import Counter

import numpy as np
import pandas as pd
"""),
    code(r"""
random.seed(42)
topics = {
    "billing": ["invoice", "refund", "charge", "payment", "card", "receipt", "subscription", "price"],
    "shipping": ["parcel", "delivery", "courier", "tracking", "address", "delayed", "package", "arrived"],
    "technical": ["crash", "error", "login", "password", "update", "screen", "bug", "install"],
}
filler = ["my", "the", "please", "help", "is", "not", "with", "again", "today", "why", "a", "and"]


def make_ticket(topic):
    words = random.choices(topics[topic], k=random.randint(3, 6))
    words += random.choices(filler, k=random.randint(2, 5))
    random.shuffle(words)
    return " ".join(words).capitalize() + random.choice([".", "!", "?", "!!"])


rows = [(make_ticket(t), t) for t in random.choices(list(topics), weights=[5, 3, 4], k=450)]
rows[:3]
"""),
    code(
        r"""
tickets = pd.DataFrame(rows, columns=["text", "topic"])
tickets["topic"] = tickets["topic"].astype("category")
tickets.to_csv("tickets.csv", index=False)
tickets.sample(5, random_state=1)
""",
        files=["tickets.csv"],
    ),
    code(r"""
df = pd.read_csv("tickets.csv", dtype={"topic": "category"})
df.topic.value_counts()
"""),
    md("## Cleaning the text"),
    code(r"""
df["n_words"] = df["text"].str.split().str.len()
df["shouting"] = df["text"].str.endswith("!!")
df["clean"] = df["text"].str.lower().str.replace(r"[^a-z ]", "", regex=True)
df.head()
"""),
    code(r"""
def tokenize(text, stop=frozenset(filler)):
    return [w for w in re.findall(r"[a-z]+", text.lower()) if w not in stop]
"""),
    code(r"""
word_counts = Counter(w for text in df["clean"] for w in tokenize(text))
word_counts.most_common(8)
"""),
    code(r"""
%matplotlib inline
import matplotlib.pyplot as plt
import seaborn as sns

sns.set_theme(style="ticks", context="notebook")
"""),
    code(r"""
top_words = pd.DataFrame(word_counts.most_common(15), columns=["word", "count"])
ax = sns.barplot(data=top_words, y="word", x="count", color="steelblue")
ax.set_title("most common words")
"""),
    code(r"""
ax.bar_label(ax.containers[0], fontsize=7)
ax.figure
"""),
    md("## A pipeline with our tokenizer"),
    code(r"""
from sklearn.model_selection import train_test_split

train, test = train_test_split(df, test_size=0.3, random_state=7, stratify=df["topic"])
len(train), len(test)
"""),
    code(r"""
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.naive_bayes import MultinomialNB
from sklearn.pipeline import Pipeline

vectorizer = TfidfVectorizer(tokenizer=tokenize, token_pattern=None)
nb = MultinomialNB()
text_clf = Pipeline([("tfidf", vectorizer), ("nb", nb)])
"""),
    code(r"""
from sklearn.model_selection import GridSearchCV

gs = GridSearchCV(text_clf, {"nb__alpha": [0.1, 0.5, 1.0], "tfidf__sublinear_tf": [False, True]}, cv=3)
gs.fit(train["text"], train["topic"])
print(gs.best_params_)
"""),
    code(r"""
pd.DataFrame(gs.cv_results_).sort_values("rank_test_score")[["params", "mean_test_score"]].head()
"""),
    code(r"""
from sklearn.metrics import classification_report

predicted = gs.predict(test["text"])
print(classification_report(test["topic"], predicted))
"""),
    code(r"""
best_vec = gs.best_estimator_.named_steps["tfidf"]
best_nb = gs.best_estimator_.named_steps["nb"]
vocab = np.array(best_vec.get_feature_names_out())
len(vocab)
"""),
    code(r"""
for label, log_probs in zip(best_nb.classes_, best_nb.feature_log_prob_):
    print(f"{label:10s}", ", ".join(vocab[np.argsort(log_probs)[-5:][::-1]]))
"""),
    code(
        r"""
with open("vocabulary.txt", "w") as fh:
    fh.write("\n".join(vocab))
print(f"saved {len(vocab)} terms")
""",
        files=["vocabulary.txt"],
    ),
    md("## Routing"),
    code(r'''
def make_router(model, threshold):
    """Route a ticket to its topic, or to a human when the model is unsure."""
    def route(text):
        probs = model.predict_proba([text])[0]
        best = probs.argmax()
        return model.classes_[best] if probs[best] >= threshold else "human"
    return route

route = make_router(gs.best_estimator_, threshold=0.6)
'''),
    code(r"""
new_tickets = [
    "My card was charged twice, please refund",
    "The courier lost my package",
    "App crash after the update",
    "Hello, is anyone there?",
]
{t: route(t) for t in new_tickets}
"""),
    code(r"""
test = test.assign(predicted=predicted)
confusions = pd.crosstab(test["topic"], test["predicted"])
confusions
"""),
    code(r"""
ax2 = sns.heatmap(confusions, annot=True, fmt="d", cmap="Greens")
ax2.set_ylabel("true topic")
"""),
    code(r"""
lengths = df.groupby("topic", observed=True)["n_words"].describe()[["mean", "min", "max"]]
lengths
"""),
    code(r"""
shout_rate = df.groupby("topic", observed=True)["shouting"].mean().rename("share ending in !!")
shout_rate.to_frame()
"""),
]

# ---- 7. A/B test --------------------------------------------------------------------------

AB_TEST = [
    md(r"""
# Did the new checkout page convert better?

An A/B test analysed three ways — a chi-square test, a two-proportion z-test
and a Bayesian beta-binomial model — followed by a bootstrap of revenue, a
warning about peeking, and simulations of the false-positive rate and power.
"""),
    code(r"""
%matplotlib inline
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
import seaborn as sns
from scipy import stats

sns.set_theme(style="darkgrid")
"""),
    code(
        r"""
np.random.seed(2023)
n_users = 4000
variant = np.random.choice(["control", "treatment"], size=n_users)
device = np.random.choice(["desktop", "mobile", "tablet"], p=[0.5, 0.4, 0.1], size=n_users)
base = np.where(device == "mobile", 0.08, 0.11)
lift = np.where(variant == "treatment", 0.015, 0.0)
converted = np.random.random(n_users) < base + lift
order_value = np.where(converted, np.random.lognormal(3.5, 0.4, n_users), 0.0).round(2)
sessions = pd.DataFrame({"user_id": np.arange(n_users), "variant": variant, "device": device,
                         "converted": converted, "order_value": order_value})
sessions.to_csv("sessions.csv", index=False)
sessions.head()
""",
        files=["sessions.csv"],
    ),
    code(r"""
data = pd.read_csv("sessions.csv")
for col in ("variant", "device"):
    data[col] = data[col].astype("category")
data.dtypes
"""),
    code(r"""
rates = data.groupby("variant", observed=True)["converted"].agg(["mean", "sum", "count"])
rates
"""),
    code(r"""
by_device = data.pivot_table(index="device", columns="variant", values="converted",
                             aggfunc="mean", observed=True)
(by_device * 100).round(2)
"""),
    md("## Frequentist tests"),
    code(r"""
table = pd.crosstab(data["variant"], data["converted"])
chi2, p_value, dof, _ = stats.chi2_contingency(table)
print(f"chi-square {chi2:.2f}, p = {p_value:.4f}")
"""),
    code(r'''
def two_proportion_z(successes, totals):
    """z statistic and two-sided p-value for the difference of two proportions."""
    p1, p2 = successes / totals
    pooled = successes.sum() / totals.sum()
    se = np.sqrt(pooled * (1 - pooled) * (1 / totals[0] + 1 / totals[1]))
    z = (p2 - p1) / se
    return z, 2 * stats.norm.sf(abs(z))
'''),
    code(r"""
z, p_z = two_proportion_z(rates["sum"].to_numpy(), rates["count"].to_numpy())
z, p_z
"""),
    md("## A Bayesian view"),
    code(r"""
posterior = {v: stats.beta(1 + r["sum"], 1 + r["count"] - r["sum"]) for v, r in rates.iterrows()}
{v: round(d.mean(), 4) for v, d in posterior.items()}
"""),
    code(r"""
rng_post = np.random.default_rng(1)
draws = {v: d.rvs(size=20000, random_state=rng_post) for v, d in posterior.items()}
prob_better = np.mean(draws["treatment"] > draws["control"])
print(f"P(treatment beats control) = {prob_better:.3f}")
"""),
    code(r"""
ax = sns.histplot({"control": draws["control"], "treatment": draws["treatment"]},
                  bins=60, element="step", stat="density")
ax.set_xlabel("conversion rate")
"""),
    code(r"""
for v, color in zip(posterior, ["tab:blue", "tab:orange"]):
    ax.axvline(posterior[v].mean(), color=color, linestyle="--")
ax.set_title("posterior conversion rates")
ax.figure
"""),
    md("## Revenue per user, bootstrapped"),
    code(r'''
def bootstrap_means(values, n, rng):
    """Yield the means of *n* resamples of *values*."""
    for _ in range(n):
        yield rng.choice(values, size=len(values)).mean()
'''),
    code(r"""
rng = np.random.default_rng(99)
revenue = {v: g["order_value"].to_numpy() for v, g in data.groupby("variant", observed=True)}
boot = {v: np.fromiter(bootstrap_means(vals, 300, rng), float) for v, vals in revenue.items()}
{v: np.percentile(b, [2.5, 97.5]).round(3) for v, b in boot.items()}
"""),
    code(r"""
diff = boot["treatment"] - boot["control"]
h = plt.hist(diff, bins=30, color="tab:purple", alpha=0.7)
plt.axvline(0, color="k")
"""),
    code(r"""
print(f"the tallest bar holds {int(h[0].max())} of {len(diff)} resamples; "
      f"{np.mean(diff > 0):.1%} are above zero")
"""),
    md("Conversion rates as a dashboard would show them: with a little measurement noise."),
    code(r'''
noise_rng = np.random.RandomState(11)

def with_noise(values, scale=0.002):
    """The values plus noise drawn from the notebook's own generator (which this advances)."""
    return values + noise_rng.normal(0, scale, len(values))
'''),
    code(r"""
shown_rates = with_noise(np.array([0.100, 0.112, 0.105]))
shown_rates.round(4)
"""),
    code(r"""
print("next draws of the dashboard's generator:", noise_rng.normal(size=3).round(4))
"""),
    code(r"""
stats.mannwhitneyu(revenue["treatment"][revenue["treatment"] > 0],
                   revenue["control"][revenue["control"] > 0])
"""),
    md("## The danger of peeking"),
    code(r'''
class SequentialMonitor:
    """Looks at the running p-value after every batch, as an impatient analyst would."""

    def __init__(self, alpha=0.05):
        self.alpha = alpha
        self.looks = []

    def look(self, a, b):
        _, p = two_proportion_z(np.array([a.sum(), b.sum()]), np.array([len(a), len(b)]))
        self.looks.append(p)
        return p < self.alpha

    @property
    def stopped_early(self):
        return any(p < self.alpha for p in self.looks[:-1])
'''),
    code(r"""
monitor = SequentialMonitor()
c = data.loc[data["variant"] == "control", "converted"].to_numpy()
t = data.loc[data["variant"] == "treatment", "converted"].to_numpy()
for n in range(200, min(len(c), len(t)), 200):
    monitor.look(c[:n], t[:n])
len(monitor.looks), monitor.stopped_early
"""),
    code(r"""
fig, ax_seq = plt.subplots(figsize=(6, 3))
ax_seq.plot(range(200, 200 * (len(monitor.looks) + 1), 200), monitor.looks, marker="o")
ax_seq.axhline(monitor.alpha, color="red", linestyle=":")
ax_seq.set_yscale("log")
ax_seq.set(xlabel="users per arm", ylabel="p-value");
"""),
    md("## Simulations: false positives and power"),
    code(r"""
def aa_test(n, rate=0.1):
    a = np.random.random(n) < rate
    b = np.random.random(n) < rate
    return two_proportion_z(np.array([a.sum(), b.sum()]), np.array([n, n]))[1]

false_positive_rate = np.mean([aa_test(1000) < 0.05 for _ in range(300)])
print(f"A/A false positive rate: {false_positive_rate:.3f}")
"""),
    code(r"""
def simulated_power(lift, n=2000, runs=200, base=0.1):
    hits = 0
    for _ in range(runs):
        a = np.random.binomial(n, base)
        b = np.random.binomial(n, base + lift)
        hits += two_proportion_z(np.array([a, b]), np.array([n, n]))[1] < 0.05
    return hits / runs

power = pd.Series({lift: simulated_power(lift) for lift in (0.0, 0.01, 0.02, 0.03)}, name="power")
power
"""),
    code(r"""
ax_p = power.plot(marker="o")
ax_p.set(xlabel="true lift", ylabel="power", title="power at 2000 users per arm");
"""),
    code(r"""
report = pd.DataFrame({
    "metric": ["conversion (control)", "conversion (treatment)", "p-value (chi2)", "P(treatment better)"],
    "value": [rates.loc["control", "mean"], rates.loc["treatment", "mean"], p_value, prob_better],
})
report
"""),
]

# ---- 8. sensors ---------------------------------------------------------------------------

SENSORS = [
    md(r"""
# Cleaning a week of greenhouse temperature readings

Three sensors report every ten minutes. Packets get lost and the odd reading
spikes. We fill gaps, remove spikes, apply each sensor's calibration offset,
resample, look at the daily cycle and raise alerts.
"""),
    code(r"""
import numpy as np
import pandas as pd
from scipy import signal, stats
"""),
    code(r'''
from dataclasses import dataclass, field


@dataclass
class Sensor:
    name: str
    location: str
    offset: float = 0.0
    notes: list = field(default_factory=list)

    def calibrate(self, readings):
        """Readings corrected by this sensor's known offset."""
        return readings - self.offset
'''),
    code(r"""
sensors = [Sensor("t1", "north bench", 0.4), Sensor("t2", "south bench", -0.2),
           Sensor("t3", "propagator", 1.1)]
registry = {s.name: s for s in sensors}
main_sensor = registry["t3"]
"""),
    code(
        r"""
rng = np.random.default_rng(123)
index = pd.date_range("2024-05-01", periods=24 * 6 * 7, freq="10min")
hours = (index.hour + index.minute / 60).to_numpy()
frames = []
for s in sensors:
    values = 20 + 4 * np.sin((hours - 9) / 24 * 2 * np.pi) + s.offset
    values = values + rng.normal(0, 0.3, len(index))
    values[rng.choice(len(index), 12, replace=False)] = np.nan  # dropped packets
    values[rng.choice(len(index), 4, replace=False)] += 15  # spikes
    frames.append(pd.DataFrame({"time": index, "sensor": s.name, "temp": values.round(2)}))
pd.concat(frames).to_csv("readings.csv", index=False)
""",
        files=["readings.csv"],
    ),
    code(r"""
readings = pd.read_csv("readings.csv", parse_dates=["time"])
readings["sensor"] = readings["sensor"].astype("category")
readings.info()
"""),
    code(r"""
readings["temp"].isna().groupby(readings["sensor"], observed=True).sum()
"""),
    code(r"""
wide = readings.pivot(index="time", columns="sensor", values="temp")
wide.head()
"""),
    md("## Gaps and spikes"),
    code(r"""
wide.interpolate(method="time", limit=3, inplace=True)
wide.isna().sum()
"""),
    code(r"""
z = wide.apply(lambda col: np.abs(stats.zscore(col, nan_policy="omit")))
spikes = z > 4
spikes.sum()
"""),
    code(r"""
wide = wide.mask(spikes).interpolate(method="time")
for name in wide.columns:
    registry[name].notes.append(f"{int(spikes[name].sum())} spikes removed")
main_sensor.notes
"""),
    code(r"""
calibrated = pd.DataFrame({name: registry[name].calibrate(wide[name]) for name in wide.columns})
calibrated.describe().round(2)
"""),
    code(r"""
hourly = calibrated.resample("1h").mean()
daily = calibrated.resample("1D").agg(["min", "max"])
daily.round(1)
"""),
    md("## Plots"),
    code(r"""
%matplotlib inline
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(8, 3))
hourly.plot(ax=ax, linewidth=1)
ax.set_ylabel("°C")
"""),
    code(r"""
smooth = calibrated.rolling("3h").mean()
ax.plot(smooth.index, smooth["t3"], color="black", linewidth=2, label="t3, 3 h mean")
ax.legend(loc="upper right")
fig
"""),
    md("## The daily cycle"),
    code(r"""
values = calibrated.to_numpy(copy=True)
first_day = values[: 24 * 6]
np.shares_memory(first_day, values)
"""),
    code(r"""
first_day -= first_day.mean(axis=0)
values[:3].round(3)
"""),
    code(r"""
freqs, power = signal.periodogram(calibrated["t1"].to_numpy(), fs=6 * 24)
peak = freqs[np.argmax(power[1:]) + 1]
print(f"dominant cycle: {1 / peak:.2f} days")
"""),
    code(r"""
corr = calibrated.corr()
corr.round(3)
"""),
    code(r"""
meta = pd.DataFrame([{"sensor": s.name, "location": s.location, "offset": s.offset} for s in sensors])
summary = (calibrated.agg(["mean", "std"]).T.rename_axis("sensor").reset_index()
           .merge(meta, on="sensor"))
summary
"""),
    code(r"""
res = stats.linregress(np.arange(len(daily)), daily[("t1", "max")])
print(f"daily maxima trend: {res.slope:+.3f} °C/day (p = {res.pvalue:.2f})")
"""),
    md("## Alerts"),
    code(r'''
def threshold_alerts(frame, limit):
    """Yield (time, sensor, value) for every reading above *limit*."""
    for name in frame.columns:
        above = frame[name][frame[name] > limit]
        for when, value in above.items():
            yield when, name, value
'''),
    code(r"""
alerts = list(threshold_alerts(calibrated, 23.5))
print(f"{len(alerts)} readings above 23.5 °C")
alerts[:3]
"""),
    code(r"""
alert_counts = pd.Series([name for _, name, _ in alerts]).value_counts()
ax2 = alert_counts.plot.bar(color="tab:red")
ax2.set_title("alerts per sensor")
"""),
    code(r"""
main_sensor.offset = 1.0
registry["t3"].offset, sensors[2].offset
"""),
    code(
        r"""
calibrated.to_csv("calibrated.csv")
with open("calibrated.csv") as fh:
    print(fh.readline().strip())
""",
        files=["calibrated.csv"],
    ),
]

# ---- 9. customer segments -----------------------------------------------------------------

SEGMENTS = [
    md(r"""
# Segmenting customers with k-means

Age, income and visit frequency of 500 customers; standardise, choose k by
the elbow and the silhouette, describe the segments in words, and compare with
a hierarchical clustering.
"""),
    code(r"""
%matplotlib inline
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
import seaborn as sns
from sklearn.datasets import make_blobs
"""),
    code(
        r"""
centers = [[25, 20, 2], [45, 70, 8], [35, 45, 15], [60, 30, 4]]
X_raw, true_segment = make_blobs(n_samples=500, centers=centers, cluster_std=[5, 8, 6, 7],
                                 random_state=4)
customers = pd.DataFrame(X_raw, columns=["age", "income_k", "visits_per_month"]).round(1)
customers["visits_per_month"] = customers["visits_per_month"].clip(lower=0)
customers.insert(0, "customer_id", [f"C{i:04d}" for i in range(len(customers))])
customers["channel"] = np.random.choice(["web", "store", "app"], len(customers), p=[0.5, 0.3, 0.2])
customers.to_csv("customers.csv", index=False)
customers.shape
""",
        files=["customers.csv"],
    ),
    code(r"""
df = pd.read_csv("customers.csv")
df["channel"] = df["channel"].astype("category")
df.describe(include="all")
"""),
    code(r"""
g = sns.pairplot(df.drop(columns="customer_id"), hue="channel", plot_kws={"s": 10}, height=1.8)
"""),
    md("## Standardise, then choose k"),
    code(r"""
from sklearn.preprocessing import StandardScaler

features = ["age", "income_k", "visits_per_month"]
scaler = StandardScaler()
Z = scaler.fit_transform(df[features])
Z.mean(axis=0).round(6), Z.std(axis=0).round(6)
"""),
    code(r"""
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score

inertia, silhouette = {}, {}
for k in range(2, 8):
    km = KMeans(n_clusters=k, n_init=5, random_state=0).fit(Z)
    inertia[k] = km.inertia_
    silhouette[k] = silhouette_score(Z, km.labels_)
"""),
    code(r"""
fig, (ax_elbow, ax_sil) = plt.subplots(1, 2, figsize=(9, 3))
ax_elbow.plot(list(inertia), list(inertia.values()), "o-")
ax_elbow.set(title="elbow", xlabel="k")
ax_sil.plot(list(silhouette), list(silhouette.values()), "o-", color="tab:orange")
ax_sil.set(title="silhouette", xlabel="k");
"""),
    code(r"""
best_k = max(silhouette, key=silhouette.get)
for axis in (ax_elbow, ax_sil):
    axis.axvline(best_k, color="gray", linestyle="--")
print("chosen k:", best_k)
fig
"""),
    md("## The segments"),
    code(r"""
kmeans = KMeans(n_clusters=best_k, n_init=10, random_state=0)
df["segment"] = kmeans.fit_predict(Z)
df["segment"] = df["segment"].astype("category")
df["segment"].value_counts().sort_index()
"""),
    code(r"""
profile = df.groupby("segment", observed=True)[features].mean().round(1)
profile
"""),
    code(r"""
centroids = pd.DataFrame(scaler.inverse_transform(kmeans.cluster_centers_), columns=features).round(1)
centroids
"""),
    code(r"""
def describe_segment(row):
    age = "young" if row.age < 35 else ("middle-aged" if row.age < 50 else "older")
    money = "high-income" if row.income_k > 50 else "modest-income"
    habit = "frequent" if row.visits_per_month > 8 else "occasional"
    return f"{age}, {money}, {habit}"

names = {i: describe_segment(row) for i, row in profile.iterrows()}
names
"""),
    code(r"""
df["segment_name"] = df["segment"].map(names).astype("category")
df.head()
"""),
    code(r"""
ax = sns.scatterplot(data=df, x="income_k", y="visits_per_month", hue="segment_name",
                     style="channel", s=18)
ax.legend(fontsize=7, bbox_to_anchor=(1.02, 1), loc="upper left")
"""),
    code(r"""
ax.scatter(centroids["income_k"], centroids["visits_per_month"], marker="X", s=150, color="black")
ax.figure
"""),
    code(r"""
mix = pd.crosstab(df["segment_name"], df["channel"], normalize="index").round(2)
mix
"""),
    code(r"""
from sklearn.metrics import adjusted_rand_score

print(f"agreement with the generating blobs: ARI = {adjusted_rand_score(true_segment, df['segment']):.3f}")
"""),
    md("## A hierarchical clustering for comparison"),
    code(r"""
from scipy.cluster.hierarchy import dendrogram, fcluster, linkage

sample = Z[::5]
L = linkage(sample, method="ward")
hier = fcluster(L, t=best_k, criterion="maxclust")
np.bincount(hier)
"""),
    code(r"""
plt.figure(figsize=(8, 3))
dendro = dendrogram(L, no_labels=True, color_threshold=L[-best_k + 1, 2])
plt.title("ward linkage on every fifth customer");
"""),
    code(r"""
len(dendro["leaves"]), dendro["color_list"][:5]
"""),
    code(r"""
labelings = [("kmeans", df["segment"].cat.codes), ("random", np.random.randint(0, best_k, len(df)))]
scores = {name: round(silhouette_score(Z, labels), 4) for name, labels in labelings}
scores
"""),
    code(
        r"""
export = df[["customer_id", "segment", "segment_name"]]
export.to_csv("segments.csv", index=False)
print(pd.read_csv("segments.csv").groupby("segment_name").size())
""",
        files=["segments.csv"],
    ),
    code(r"""
g.axes.shape, type(g).__name__
"""),
    code(r"""
new_customers = pd.DataFrame({"age": [28, 55], "income_k": [22, 75], "visits_per_month": [3, 10]})
predicted = kmeans.predict(scaler.transform(new_customers[features]))
[names[i] for i in predicted]
"""),
]

# ---- 10. house prices ---------------------------------------------------------------------

HOUSES = [
    md(r"""
# House prices: a ColumnTransformer and ridge regression

Numeric and categorical features prepared by one `ColumnTransformer`, a ridge
regression tuned by grid search, residual diagnostics with `scipy.stats`, and
the fitted model saved to disk and loaded back.
"""),
    code(r"""
import pickle

import numpy as np
import pandas as pd
from scipy import stats
"""),
    code(
        r"""
rng = np.random.default_rng(31)
n = 700
neighbourhoods = ["Old Town", "Riverside", "Hillcrest", "Docklands"]
premium = dict(zip(neighbourhoods, [40, 25, 60, 10]))
houses = pd.DataFrame({
    "area_m2": rng.normal(95, 30, n).clip(30, 260).round(0),
    "rooms": rng.integers(1, 7, n),
    "year_built": rng.integers(1900, 2023, n).astype(float),
    "neighbourhood": rng.choice(neighbourhoods, n, p=[0.2, 0.3, 0.2, 0.3]),
    "garden": rng.random(n) < 0.35,
})
houses["price_k"] = (
    50 + 2.1 * houses.area_m2 + 8 * houses.rooms + 0.3 * (houses.year_built - 1900)
    + houses.neighbourhood.map(premium) + 15 * houses.garden + rng.normal(0, 25, n)
).round(1)
houses.loc[rng.choice(n, 20, replace=False), "year_built"] = np.nan
houses.to_csv("houses.csv", index=False)
""",
        files=["houses.csv"],
    ),
    code(r"""
houses = pd.read_csv("houses.csv")
houses.head()
"""),
    code(r"""
houses.isna().sum()[lambda s: s > 0]
"""),
    code(r"""
houses["age"] = 2024 - houses["year_built"]
houses = houses.drop(columns="year_built")
houses["neighbourhood"] = houses["neighbourhood"].astype("category")
houses["garden"] = houses["garden"].map({True: "yes", False: "no"})
houses.dtypes
"""),
    code(r"""
houses.groupby("neighbourhood", observed=True)["price_k"].agg(["median", "mean", "size"]).round(1)
"""),
    md("## A first look"),
    code(r"""
%matplotlib inline
import matplotlib.pyplot as plt
import seaborn as sns

ax = sns.histplot(houses["price_k"], kde=True, bins=30)
ax.set_xlabel("price (k€)")
"""),
    code(r"""
skewness = stats.skew(houses["price_k"])
ax.text(0.98, 0.9, f"skew {skewness:.2f}", transform=ax.transAxes, ha="right")
ax.figure
"""),
    code(r"""
sns.boxplot(data=houses, x="neighbourhood", y="price_k", hue="garden")
"""),
    md("## Preparing the features"),
    code(r"""
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

numeric = ["area_m2", "rooms", "age"]
categorical = ["neighbourhood", "garden"]
numeric_steps = make_pipeline(SimpleImputer(strategy="median"), StandardScaler())
encoder = OneHotEncoder(handle_unknown="ignore")
prep = ColumnTransformer([("num", numeric_steps, numeric), ("cat", encoder, categorical)])
"""),
    code(r"""
from sklearn.linear_model import Ridge
from sklearn.model_selection import train_test_split

ridge = Ridge()
model = Pipeline([("prep", prep), ("ridge", ridge)])
train, test = train_test_split(houses, test_size=0.25, random_state=3)
X_cols = numeric + categorical
"""),
    code(r"""
from sklearn.model_selection import GridSearchCV

search = GridSearchCV(model, {"ridge__alpha": [0.1, 1, 10, 100]}, cv=5,
                      scoring="neg_mean_absolute_error")
search.fit(train[X_cols], train["price_k"])
search.best_params_, round(-search.best_score_, 2)
"""),
    code(r"""
pd.DataFrame(search.cv_results_)[["param_ridge__alpha", "mean_test_score", "std_test_score"]]
"""),
    md("Fit the pipeline itself, so that its steps `prep` and `ridge` can be inspected:"),
    code(r"""
model.set_params(ridge__alpha=search.best_params_["ridge__alpha"])
model.fit(train[X_cols], train["price_k"])
prep.named_transformers_["cat"].categories_
"""),
    code(r"""
feature_names = prep.get_feature_names_out()
coefs = pd.Series(ridge.coef_, index=feature_names).sort_values()
coefs.round(2)
"""),
    md("## Residuals"),
    code(r"""
from sklearn.metrics import r2_score

pred = search.predict(test[X_cols])
residuals = test["price_k"] - pred
print(f"MAE {np.abs(residuals).mean():.2f} k€, R² {r2_score(test['price_k'], pred):.3f}")
"""),
    code(r"""
fig, (ax_res, ax_qq) = plt.subplots(1, 2, figsize=(9, 3.5))
ax_res.scatter(pred, residuals, s=8, alpha=0.6)
ax_res.axhline(0, color="k", linewidth=1)
ax_res.set(xlabel="predicted", ylabel="residual")
stats.probplot(residuals, dist="norm", plot=ax_qq);
"""),
    code(r"""
shapiro = stats.shapiro(residuals)
print(f"Shapiro-Wilk W={shapiro.statistic:.4f}, p={shapiro.pvalue:.3f}")
"""),
    code(r"""
ax_res.set_title("residuals look structureless" if shapiro.pvalue > 0.01 else "residuals are not normal")
fig
"""),
    md("## Saving the model"),
    code(
        r"""
import os

with open("model.pkl", "wb") as fh:
    pickle.dump(search.best_estimator_, fh)
os.path.getsize("model.pkl") > 0
""",
        files=["model.pkl"],
    ),
    code(r"""
with open("model.pkl", "rb") as fh:
    loaded = pickle.load(fh)
np.allclose(loaded.predict(test[X_cols]), pred)
"""),
    code(r"""
what_if = test[X_cols].head(3).copy()
what_if["garden"] = "yes"
pd.DataFrame({"as is": loaded.predict(test[X_cols].head(3)), "with garden": loaded.predict(what_if)}).round(1)
"""),
    code(r"""
pd.set_option("display.precision", 2)
by_hood = (test.assign(pred=pred, abs_err=np.abs(residuals))
           .groupby("neighbourhood", observed=True)[["price_k", "pred", "abs_err"]].mean())
by_hood
"""),
    code(r"""
ci = stats.t.interval(0.95, len(residuals) - 1, loc=residuals.mean(), scale=stats.sem(residuals))
print(f"mean residual {residuals.mean():+.2f}, 95% CI {ci[0]:+.2f} to {ci[1]:+.2f}")
"""),
]

NOTEBOOKS: dict[str, list[Any]] = {
    "01_iris_pipeline.ipynb": IRIS,
    "02_digits_classifier.ipynb": DIGITS,
    "03_sales_cleaning.ipynb": SALES,
    "04_waiting_time_distributions.ipynb": DISTRIBUTIONS,
    "05_numpy_training_loop.ipynb": TRAINING,
    "06_ticket_routing.ipynb": TEXT,
    "07_ab_test.ipynb": AB_TEST,
    "08_greenhouse_sensors.ipynb": SENSORS,
    "09_customer_segments.ipynb": SEGMENTS,
    "10_house_prices.ipynb": HOUSES,
}


def build(name: str) -> Any:
    """The notebook *name* as an nbformat v4.5 node with stable cell ids."""
    stem = name.removesuffix(".ipynb").replace("_", "-")
    cells = NOTEBOOKS[name]
    for index, cell in enumerate(cells):
        # Stable ids: regenerating must not change a byte of the committed files.
        cell.id = f"{stem[:48]}-{index:02d}"
    nb = new_notebook(cells=cells)
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def write_all(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in NOTEBOOKS:
        nbformat.write(build(name), out / name)
        written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write the notebooks to")
    args = parser.parse_args(argv)
    for path in write_all(args.out):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
