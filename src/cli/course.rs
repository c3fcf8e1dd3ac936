//! `mcpsim course`: the course on the statelessness guarantee, in order. `mcpsim course` lists the lessons
//! (number, title, the question, the command to run first); `mcpsim course N` prints lesson N's page.
//!
//! The lessons are data ([`LESSONS`]): each names its page under `docs/course/` (embedded, so an installed
//! binary prints it anywhere), its scenarios and the mutant that breaks it. `tests/docs.rs` walks the pages in
//! this order and runs every command they show; the grader (`mcpsim course check N`, issue 39 item 2) maps its
//! levels to these numbers.

use crate::cli::common::EXIT_USAGE;
use std::io::Write;
use std::process::ExitCode;

/// One lesson of the course.
#[derive(Debug, Clone, Copy)]
pub struct Lesson {
    pub number: u32,
    pub title: &'static str,
    /// The question the lesson answers.
    pub question: &'static str,
    /// The page, relative to the repository (`docs/course/…`).
    pub page: &'static str,
    /// The page's text (embedded).
    pub text: &'static str,
    /// The scenarios it runs: library names (`scenarios/`), or target scenarios (`targets/scenarios/`).
    pub scenarios: &'static [&'static str],
    /// The command a learner runs first.
    pub command: &'static str,
    /// The mutant of the zoo that breaks what the lesson teaches (`mcpsim mutants`).
    pub mutant: &'static str,
}

/// The course, in order (issue 39 item 1).
pub const LESSONS: &[Lesson] = &[
    Lesson {
        number: 1,
        title: "One instance",
        question: "Why does a destructive tool not delete on the first request, and what does round 2 carry?",
        page: "docs/course/01-one-instance.md",
        text: include_str!("../../docs/course/01-one-instance.md"),
        scenarios: &["01-lesson-exchange-on-one-instance"],
        command: "mcpsim run 01-lesson-exchange-on-one-instance",
        mutant: "unsigned-state",
    },
    Lesson {
        number: 2,
        title: "The retry on another instance",
        question: "Round 2 lands on an instance that never saw round 1: how can it finish the delete?",
        page: "docs/course/02-the-retry-elsewhere.md",
        text: include_str!("../../docs/course/02-the-retry-elsewhere.md"),
        scenarios: &["02-retry-lands-on-another-instance"],
        command: "mcpsim run 02-retry-lands-on-another-instance",
        mutant: "sticky-session",
    },
    Lesson {
        number: 3,
        title: "The crash",
        question: "An instance dies mid-confirmation: what survives, and what does the client learn?",
        page: "docs/course/03-the-crash.md",
        text: include_str!("../../docs/course/03-the-crash.md"),
        scenarios: &["03-retry-after-the-first-instance-crashed", "16-crash-between-claim-and-delete"],
        command: "mcpsim run 16-crash-between-claim-and-delete",
        mutant: "claim-then-delete",
    },
    Lesson {
        number: 4,
        title: "The race",
        question: "Two accepts of one confirmation arrive at two instances at once: how many deletes?",
        page: "docs/course/04-the-race.md",
        text: include_str!("../../docs/course/04-the-race.md"),
        scenarios: &["04-accepts-race-for-one-note", "05-accepts-race-for-different-candidates"],
        command: "mcpsim explore 04-accepts-race-for-one-note --seeds 200",
        mutant: "delete-then-claim",
    },
    Lesson {
        number: 5,
        title: "Decline and cancel",
        question: "The user says no, or closes the form: what may happen to the confirmation afterwards?",
        page: "docs/course/05-decline-and-cancel.md",
        text: include_str!("../../docs/course/05-decline-and-cancel.md"),
        scenarios: &["08-decline-then-replayed-accept", "09-cancel-then-accept-elsewhere"],
        command: "mcpsim run 08-decline-then-replayed-accept",
        mutant: "decline-not-consuming",
    },
    Lesson {
        number: 6,
        title: "Expiry and skew",
        question: "Whose clock decides that a confirmation is too old, and what if the clocks disagree?",
        page: "docs/course/06-expiry-and-skew.md",
        text: include_str!("../../docs/course/06-expiry-and-skew.md"),
        scenarios: &["10-state-expires-between-rounds", "23-clock-behind-beyond-the-grace"],
        command: "mcpsim run 10-state-expires-between-rounds",
        mutant: "admits-past-retention",
    },
    Lesson {
        number: 7,
        title: "The delete after the form",
        question: "The note changes between the form and the accept: which note may be deleted?",
        page: "docs/course/07-the-delete-after-the-form.md",
        text: include_str!("../../docs/course/07-the-delete-after-the-form.md"),
        scenarios: &["06-note-deleted-after-the-form-was-shown", "07-note-moved-out-after-the-form-was-shown"],
        command: "mcpsim run 07-note-moved-out-after-the-form-was-shown",
        mutant: "no-live-recheck",
    },
    Lesson {
        number: 8,
        title: "The replay store full",
        question: "The store that remembers used nonces is full: refuse, or forget one?",
        page: "docs/course/08-the-replay-store-full.md",
        text: include_str!("../../docs/course/08-the-replay-store-full.md"),
        scenarios: &["17-full-replay-store-fails-closed"],
        command: "mcpsim run 17-full-replay-store-fails-closed",
        mutant: "evicting-replay-store",
    },
    Lesson {
        number: 9,
        title: "Lost answers",
        question: "The delete happened but its answer was lost: what may the retry do, and what must it say?",
        page: "docs/course/09-lost-answers.md",
        text: include_str!("../../docs/course/09-lost-answers.md"),
        scenarios: &["08-answer-lost-then-retry-elsewhere", "09-retry-while-the-first-is-paused", "10-accept-delivered-twice"],
        command: "mcpsim run --target targets/mcpsim-stdio.toml 08-answer-lost-then-retry-elsewhere",
        mutant: "no-outcome-on-replay",
    },
];

/// The lesson whose first scenario is `name` (a library scenario's stem), for `mcpsim scenarios`.
pub fn lesson_of_scenario(name: &str) -> Option<&'static Lesson> {
    LESSONS.iter().find(|lesson| lesson.scenarios.contains(&name))
}

/// Options of `mcpsim course`.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "\
Examples:
  mcpsim course                  # the lessons in order: the question each answers, the command to run
  mcpsim course 2                # lesson 2's page: the question, what to run and look at, the exercise
  mcpsim demo                    # the exchange every lesson builds on, on two instances

The pages are docs/course/ in the repository (docs/course/README.md is the index, glossary.md the terms).
Exit status: 0; 2 for a lesson number the course does not have."
)]
pub struct CourseArgs {
    /// The lesson to print (1-9); without it, the list of lessons.
    #[arg(value_name = "N")]
    pub lesson: Option<u32>,
    #[command(subcommand)]
    pub command: Option<CourseCommand>,
}

/// What `mcpsim course` does.
#[derive(Debug, clap::Subcommand)]
pub enum CourseCommand {
    /// The lessons in order (what `mcpsim course` alone prints).
    #[command(after_help = "Examples:\n  mcpsim course list             # the same as mcpsim course")]
    List,
    /// One lesson's page (what `mcpsim course N` prints).
    #[command(after_help = "Examples:\n  mcpsim course show 2           # the same as mcpsim course 2")]
    Show {
        /// The lesson's number (1-9).
        #[arg(value_name = "N")]
        lesson: u32,
    },
    /// Grade your own server, level by level (1 to 8, or all), with the target harness (docs/wire.md).
    Check(super::course_check::CheckArgs),
}

pub fn run(args: CourseArgs) -> ExitCode {
    let command = match (args.command, args.lesson) {
        (Some(command), _) => command,
        (None, Some(lesson)) => CourseCommand::Show { lesson },
        (None, None) => CourseCommand::List,
    };
    let text = match command {
        CourseCommand::Check(args) => return super::course_check::run(args),
        CourseCommand::List => list(),
        CourseCommand::Show { lesson } => match LESSONS.iter().find(|l| l.number == lesson) {
            Some(lesson) => show(lesson),
            None => {
                eprintln!(
                    "mcpsim course: there is no lesson {lesson}; the course has lessons 1-{} (`mcpsim course` lists them)",
                    LESSONS.len()
                );
                return ExitCode::from(EXIT_USAGE);
            }
        },
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    ExitCode::SUCCESS
}

/// The list: each lesson's number and title, its question and the command to run first.
fn list() -> String {
    let mut text = String::from(
        "The course: the statelessness guarantee, lesson by lesson (docs/course/README.md). Start with\n\
         `mcpsim demo`, then `mcpsim course 1`. Each lesson runs a scenario, shows where to look in its HTML\n\
         report, breaks the guarantee with a mutant from the zoo, and ends with an exercise.\n",
    );
    for lesson in LESSONS {
        text += &format!("\n{:>2}. {}\n", lesson.number, lesson.title);
        text += &format!("    {}\n", lesson.question);
        text += &format!("    run: {}\n", lesson.command);
        text += &format!("    the unsafe design that breaks it: mutant {}\n", lesson.mutant);
    }
    text += "\nRead one: mcpsim course N   The terms: docs/course/glossary.md\n";
    text
}

/// A lesson's page, for a terminal: the Markdown as written, its folded answers left folded.
fn show(lesson: &Lesson) -> String {
    let mut text = String::new();
    let mut folded = false;
    for line in lesson.text.lines() {
        if line.trim_start().starts_with("<details>") {
            folded = true;
            text += &format!("(The answer is folded away: it is under \"Answer\" in {}.)\n", lesson.page);
            continue;
        }
        if line.trim_start().starts_with("</details>") {
            folded = false;
            continue;
        }
        if !folded {
            text += line;
            text.push('\n');
        }
    }
    let next = LESSONS.iter().find(|l| l.number == lesson.number + 1);
    text += &match next {
        Some(next) => format!("\nNext: mcpsim course {} ({})\n", next.number, next.title),
        None => "\nThat was the last lesson. Next: write your own server (docs/course/README.md says how).\n".to_string(),
    };
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::explore::mutants;
    use crate::sim::library;

    #[test]
    fn lessons_are_numbered_in_order_and_name_what_exists() {
        for (index, lesson) in LESSONS.iter().enumerate() {
            assert_eq!(lesson.number as usize, index + 1);
            assert!(lesson.page.starts_with("docs/course/") && lesson.page.ends_with(".md"), "{}", lesson.page);
            assert!(mutants::find(lesson.mutant).is_some(), "lesson {}: no mutant {}", lesson.number, lesson.mutant);
            assert!(lesson.text.contains(lesson.command), "lesson {}'s page does not show its command {}", lesson.number, lesson.command);
            assert!(
                lesson.text.contains(&format!("--mutant {}", lesson.mutant)),
                "lesson {}'s page does not run its mutant {}",
                lesson.number,
                lesson.mutant
            );
            for scenario in lesson.scenarios {
                let in_library = library::SCENARIOS.iter().any(|(file, _)| file.trim_end_matches(".sim") == *scenario);
                let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("targets/scenarios/{scenario}.sim"));
                assert!(in_library || target.exists(), "lesson {}: no scenario {scenario}", lesson.number);
            }
        }
    }

    /// The index's table lists the lessons in this order (`tests/docs.rs` walks them in the index's order).
    #[test]
    fn the_index_links_every_lesson_in_order() {
        let index = include_str!("../../docs/course/README.md");
        let linked: Vec<String> = index
            .lines()
            .filter(|line| line.starts_with("| "))
            .filter_map(|line| line.split("](").nth(1).and_then(|rest| rest.split(')').next()))
            .map(|page| format!("docs/course/{page}"))
            .collect();
        let pages: Vec<&str> = LESSONS.iter().map(|lesson| lesson.page).collect();
        assert_eq!(linked, pages);
        for lesson in LESSONS {
            assert!(index.contains(lesson.question), "the index does not ask lesson {}'s question", lesson.number);
            assert!(index.contains(&format!("`{}`", lesson.mutant)), "the index does not name lesson {}'s mutant", lesson.number);
        }
    }

    #[test]
    fn the_list_and_every_page_fit_in_100_columns_and_answers_stay_folded() {
        let list = list();
        for lesson in LESSONS {
            assert!(list.contains(lesson.command) && list.contains(lesson.question));
            let page = show(lesson);
            assert!(!page.contains("<details>") && !page.contains("<summary>"), "lesson {} shows its answer", lesson.number);
            for line in list.lines().chain(page.lines()) {
                assert!(line.chars().count() <= 100, "lesson {}: {} columns: {line}", lesson.number, line.chars().count());
            }
        }
        assert_eq!(lesson_of_scenario("02-retry-lands-on-another-instance").map(|l| l.number), Some(2));
    }
}
