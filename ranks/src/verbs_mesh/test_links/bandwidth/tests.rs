use super::*;

#[test]
fn moderation_signals_every_hundredth_and_the_last() {
    // Window 128, 250 posts: signalled at 100, 200 and 250; completions retire 100, 100, 50.
    let mut m = Moderation::new(128);
    let signaled: Vec<u64> = (1..=250u64).filter(|&i| m.next(i == 250)).collect();
    assert_eq!(signaled, vec![100, 200, 250]);
    assert_eq!((m.retired(), m.retired(), m.retired(), m.retired()), (100, 100, 50, 0));
    // A window smaller than the interval signals once per window: never a full window of
    // unsignalled requests, which would wait forever.
    let mut m = Moderation::new(1);
    assert!((0..5).all(|i| m.next(i == 4)));
    let mut m = Moderation::new(16);
    let n = (1..=40u64).filter(|&i| m.next(i == 40)).count();
    assert_eq!(n, 3);
    assert_eq!((m.retired(), m.retired(), m.retired()), (16, 16, 8));
}
