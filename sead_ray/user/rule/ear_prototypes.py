"""The semantic ear's generic prototypes (semantic_ear.py): sentences with no domain word, so that any scenario gets
them, beside the scenario's own claims, lies and red flags. The kind probe (ear_probe.py) learns from them too."""

PRESSURE = (
    "You need to decide right now, during this call.",
    "This is only available if you say yes today.",
    "My manager will only hold this for you if you agree before we hang up.",
    "If you wait, it will be gone and you will not get it again.",
    "Everyone else around you has already signed up.",
    "You will regret it if you turn this down.",
    "I can't keep this open for you much longer, so please just agree.",
    "There are only a couple of places left, so you have to be quick.",
    "Don't think about it too much, just say yes.",
    "It would be a real shame to let this slip away.",
    "Most people in your position jumped at it straight away.",
    "The people down the road are already doing it, you don't want to fall behind.",
    "I pulled a lot of strings to get this for you, so I'm counting on you.",
    "I'd be in trouble with my boss if you said no.",
    "I can only offer this to the first few who agree.",
    "The system closes this batch in a few minutes.",
    "Once I hang up, I can't offer it to you again.",
    "You'd be crazy to pass this up.",
    "Honestly, only a fool would say no to this.",
    "Let's just get it done now so you don't miss out.",
    "Your competitors will take your customers if you wait.",
    "I really need you to commit before the end of this call.",
)
CREDENTIALS = (
    "Please read me the code we just sent to your phone.",
    "Tell me the six-digit number in the text message you just received.",
    "What is your password?",
    "Can you give me your card number and the expiry date?",
    "I need your bank account details to continue.",
    "Please confirm your date of birth and your ID number.",
    "What are the three digits on the back of your card?",
    "Could you tell me your login and the security answer?",
    "Just read out the numbers from the message on your phone.",
    "I'll need the long number on the front of your bank card.",
    "What's the answer to your security question?",
    "Tell me your account username and PIN so I can link it.",
    "Can you send me a photo of your ID?",
    "Give me the one-time passcode when it arrives.",
)
PAYMENT = (
    "You just need to pay a small fee first.",
    "Please transfer the money to this account today.",
    "There is a deposit to pay before we can start.",
    "Send the payment now and we will activate it.",
    "There is a small handling charge you pay up front.",
    "You can pay by bank transfer or with a gift card.",
    "We just take a small refundable amount to hold your place.",
    "Can you send the money through the app today?",
    "There's a one-off setup cost to cover first.",
    "I'll need a payment from you before anything starts.",
)
REASSURANCE = (   # content-free: sounds like an answer, states nothing
    "Don't worry, it's all taken care of.",
    "Trust me, you will be happy with it.",
    "There is really nothing to worry about.",
    "Everything will be fine, I promise.",
    "It's all very simple, you'll see.",
    "That's a great question, and you'll love the answer.",
)
SMALL_TALK = (
    "I hope you're having a good day.",
    "How has your week been so far?",
    "The weather has been lovely lately, hasn't it?",
    "Thanks for picking up the phone.",
)
ASKS = (   # asking for the decision, beside the scenario's own ask
    "Shall I go ahead and set that up for you now?",
    "Would you like me to do that for you today?",
    "Can I sign you up for it right now?",
    "Is it okay if I start it for you?",
    "Would you like to go ahead with it?",
    "Are you happy for me to put you down for it?",
    "Shall we get you started?",
    "Do you want me to turn it on for you?",
)
