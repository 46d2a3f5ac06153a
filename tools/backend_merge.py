"""Merging a rerun of some test modules into a backend's measured section of
results/backends.json (tools/backend_table.py's `--modules`), so that a new
backend-neutral module joins the table without rerunning the whole suite on
every backend.

A section keeps, beside its totals, each module's counts per area
(`module_areas`) and its seconds (`module_seconds`): a rerun module's old
counts are taken out of the areas and its new ones put in; every other
module's measured counts stay as they were. A section written before those
were kept (results/backends.json of 2026-11-26) can take modules it does not
have yet (nothing to take out; they are kept from then on), not a rerun of
one it has.
"""

import collections

OUTCOMES = ("passed", "skipped", "failed", "error")


def module_areas(tests, area_of):
    """{module: {area: {outcome counts, "skip_reasons": {reason: count}}}}
    from {test id: (outcome, skip reason)}."""
    modules = collections.defaultdict(dict)
    for test_id, (outcome, reason) in tests.items():
        module = test_id.split("::", 1)[0]
        area = modules[module].setdefault(area_of(test_id), {**dict.fromkeys(OUTCOMES, 0), "skip_reasons": {}})
        area[outcome] += 1
        if reason:
            area["skip_reasons"][reason] = area["skip_reasons"].get(reason, 0) + 1
    return {module: dict(sorted(areas.items())) for module, areas in sorted(modules.items())}


def areas_of(by_module):
    """The section's `areas` (counts, skip reasons most common first, the
    modules with a test there) summed over `module_areas`."""
    areas = {}
    for module, module_counts in by_module.items():
        for name, counts in module_counts.items():
            area = areas.setdefault(
                name, {**dict.fromkeys(OUTCOMES, 0), "skip_reasons": collections.Counter(), "modules": set()}
            )
            for outcome in OUTCOMES:
                area[outcome] += counts[outcome]
            area["skip_reasons"].update(counts["skip_reasons"])
            area["modules"].add(module)
    return {
        name: {**area, "skip_reasons": dict(area["skip_reasons"].most_common()), "modules": sorted(area["modules"])}
        for name, area in areas.items()
    }


def totals_of(areas):
    return {outcome: sum(area[outcome] for area in areas.values()) for outcome in OUTCOMES}


def merge_problem(old, modules):
    """Why `modules` cannot be merged into the section `old`, or None."""
    if old is None or "skipped" in old:
        return "it has no measured section to merge into (run the backend whole once)"
    kept = old.get("module_areas")
    again = sorted(m for m in modules if m in old.get("modules", {}) and (kept is None or m not in kept))
    if again:
        return (
            f"its section was written without per-module areas, so {again} cannot be taken out and rerun "
            "(run the backend whole once; modules it lacks can be added)"
        )
    return None


def merge_section(old, new, modules):
    """`old` (a measured section) with `modules` replaced by their counts,
    seconds and exit statuses in `new` (a section that ran only them)."""
    problem = merge_problem(old, modules)
    if problem:
        raise ValueError(f"merge_section: cannot merge {sorted(modules)}: {problem}")
    if "skipped" in new:
        raise ValueError(f"merge_section: the rerun of {sorted(modules)} did not run: {new['skipped']}")
    rerun = set(modules)
    kept = old.get("module_areas", {})
    areas = {
        name: {**area, "skip_reasons": collections.Counter(area["skip_reasons"]), "modules": set(area["modules"])}
        for name, area in old["areas"].items()
    }
    # Take the rerun modules' old counts out, then put the new ones in.
    for sign, by_module in ((-1, {m: kept[m] for m in rerun if m in kept}), (1, new["module_areas"])):
        for module, module_counts in by_module.items():
            for name, counts in module_counts.items():
                area = areas.setdefault(
                    name, {**dict.fromkeys(OUTCOMES, 0), "skip_reasons": collections.Counter(), "modules": set()}
                )
                for outcome in OUTCOMES:
                    area[outcome] += sign * counts[outcome]
                area["skip_reasons"].update({r: sign * c for r, c in counts["skip_reasons"].items()})
                (area["modules"].add if sign > 0 else area["modules"].discard)(module)
    areas = {
        name: {**area, "skip_reasons": dict((+area["skip_reasons"]).most_common()), "modules": sorted(area["modules"])}
        for name, area in areas.items()
        if area["modules"]
    }
    by_module = {m: a for m, a in kept.items() if m not in rerun} | new["module_areas"]
    seconds = {m: s for m, s in old.get("module_seconds", {}).items() if m not in rerun} | new["module_seconds"]
    old_rerun_seconds = sum(old.get("module_seconds", {}).get(m, 0) for m in rerun)
    statuses = {m: code for m, code in old.get("exit_statuses", {}).items() if m not in rerun}
    statuses.update(new.get("exit_statuses", {}))
    counts = {m: c for m, c in old["modules"].items() if m not in rerun} | new["modules"]
    return {
        "versions": new["versions"],
        "seconds": round(old["seconds"] - old_rerun_seconds + sum(new["module_seconds"].values()), 1),
        "exit_status": max([0, *statuses.values()], key=abs),
        "exit_statuses": statuses,
        "totals": totals_of(areas),
        "areas": areas,
        "modules": dict(sorted(counts.items())),
        # Complete when the section was written with them, else the merged modules' alone.
        "module_areas": dict(sorted(by_module.items())),
        "module_seconds": dict(sorted(seconds.items())),
    }
