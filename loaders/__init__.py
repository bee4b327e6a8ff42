"""Pure-Python load front end: headers → `LoadRequest`, expression allow-list, payload staging."""
